// What the three product shaders share (matmul.comp, matmul_tiled.comp, matmul_coop.comp): the weights
// (weights.glsl), the activations and products, one push-constant block (the backend's MatmulPush), and for the
// two tiled ones the loading of one 32-element unit of a 64-row by 32-token tile into shared memory.
#include "weights.glsl"

layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
#ifdef BLOCK_MIN
// Q4_1/Q5_1: the activations' Q8_1 block sums, fp16(d * sum q) (quantize_act.comp), one per 32 elements.
layout(std430, set = 0, binding = 3) readonly buffer S { float xs[]; };
#endif
layout(push_constant) uniform Params {
  uint rows;       // rows of this weight chunk
  uint cols;
  uint n;          // tokens
  uint x_off;      // floats
  uint y_off;      // floats: where row 0 of token 0 goes
  uint y_stride;   // floats between tokens' output rows
  uint row_bytes;
  uint groups_x;   // matmul.comp: workgroups along x (row group = group.y * groups_x + group.x)
  uint s_off;      // Q4_1/Q5_1: where token 0's block sums start in xs
  uint tpr;        // matmul.comp: invocations per row (its specialisation constant's value)
  uint x_stride;   // floats between tokens' input rows
} p;

#ifdef PUT_W
// Unit u of the tile at rows r0, tokens t0, by a workgroup of 128: invocations 0-63 dequantize their row's unit
// (past the last row: zeros), 64-127 load half a token's activations each (past the last token or column:
// zeros). The including shader says where each value goes and as what: PUT_W(row, i, v), PUT_X(token, i, v),
// and for Q4_1/Q5_1 PUT_MIN(row, v) and PUT_SUM(token, v) (the block minimum and the activations' block sum).
void load_unit(uint id, uint u, uint r0, uint t0, uint units) {
  if (id < 64u) {
    const uint r = r0 + id;
    float v[32];
    if (r < p.rows) {
      unit32(r * p.row_bytes, u, p.cols, v);
    } else {
      for (uint i = 0u; i < 32u; i++) v[i] = 0.0;
    }
    for (uint i = 0u; i < 32u; i++) PUT_W(id, i, v[i]);
#ifdef BLOCK_MIN
    PUT_MIN(id, r < p.rows ? unit_min(r * p.row_bytes, u) : 0.0);
#endif
  } else {
    const uint k = id - 64u, t = k / 2u, part = k % 2u, token = t0 + t, c0 = 32u * u + 16u * part;
    for (uint i = 0u; i < 16u; i++) {
      const uint c = c0 + i;
      PUT_X(t, 16u * part + i, token < p.n && c < p.cols ? x[p.x_off + token * p.x_stride + c] : 0.0);
    }
#ifdef BLOCK_MIN
    if (part == 0u) PUT_SUM(t, token < p.n ? xs[p.s_off + token * units + u] : 0.0);
#endif
  }
}
#endif
