#version 450
// Prefill's product, tiled: y[t][r] = sum_c x[t][c] * W[r][c] for a tile of 64 weight rows by 32 tokens per
// workgroup. For each 32-element unit of the rows, half the workgroup dequantizes the tile's 64 row units once
// (weights.glsl) into shared memory while the other half loads the 32 tokens' activations beside them; then
// every invocation takes the dot of 4 rows with 4 tokens from shared memory. Each weight unit is thus read and
// dequantized once per 32 tokens (matmul.comp: once per 8), and the products come from shared memory. The
// activations arrive rounded as the CPU backend rounds them for this weight type (quantize_act.comp); a unit's
// 32 products are summed before they join the total, as matmul.comp and the CPU's block dots do.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 128) in;

#include "weights.glsl"

layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
#ifdef BLOCK_MIN
layout(std430, set = 0, binding = 3) readonly buffer S { float xs[]; };
#endif
layout(push_constant) uniform Params {  // matmul.comp's
  uint rows;      // rows of this weight chunk
  uint cols;
  uint n;         // tokens
  uint x_off;     // floats
  uint y_off;     // floats: where row 0 of token 0 goes
  uint y_stride;  // floats between tokens' output rows
  uint row_bytes;
  uint groups_x;  // (matmul.comp's)
  uint s_off;     // Q4_1/Q5_1: where token 0's block sums start in xs
  uint tpr;       // (matmul.comp's)
  uint x_stride;  // floats between tokens' input rows
} p;

const uint kRows = 64u, kTokens = 32u;
shared float ws[kRows][33];  // one unit of the tile's rows, dequantized (33: no bank conflicts down a column)
shared float xt[kTokens][33];
#ifdef BLOCK_MIN
shared float wmin[kRows];
shared float xsum[kTokens];
#endif

void main() {
  const uint id = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * kRows, t0 = gl_WorkGroupID.y * kTokens;
  const uint units = (p.cols + 31u) / 32u;
  const uint tr = id % 16u, tt = id / 16u;  // this invocation's rows tr + 16i and tokens tt + 8j
  float acc[4][4];
  for (uint i = 0u; i < 4u; i++)
    for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
  float v[32];
  for (uint u = 0u; u < units; u++) {
    if (id < kRows) {
      const uint r = r0 + id;
      if (r < p.rows) {
        unit32(r * p.row_bytes, u, p.cols, v);
        for (uint i = 0u; i < 32u; i++) ws[id][i] = v[i];
#ifdef BLOCK_MIN
        wmin[id] = unit_min(r * p.row_bytes, u);
#endif
      } else {
        for (uint i = 0u; i < 32u; i++) ws[id][i] = 0.0;
#ifdef BLOCK_MIN
        wmin[id] = 0.0;
#endif
      }
    } else {
      // Half a token's unit per invocation; past the last token or column: zeros.
      const uint k = id - kRows, t = k / 2u, part = k % 2u, token = t0 + t, c0 = 32u * u + 16u * part;
      for (uint i = 0u; i < 16u; i++) {
        const uint c = c0 + i;
        xt[t][16u * part + i] = token < p.n && c < p.cols ? x[p.x_off + token * p.x_stride + c] : 0.0;
      }
#ifdef BLOCK_MIN
      if (part == 0u) xsum[t] = token < p.n ? xs[p.s_off + token * units + u] : 0.0;
#endif
    }
    barrier();
    for (uint i = 0u; i < 4u; i++)
      for (uint j = 0u; j < 4u; j++) {
        float s = 0.0;
        for (uint c = 0u; c < 32u; c++) s += ws[tr + 16u * i][c] * xt[tt + 8u * j][c];
#ifdef BLOCK_MIN
        s += wmin[tr + 16u * i] * xsum[tt + 8u * j];
#endif
        acc[i][j] += s;
      }
    barrier();
  }
  for (uint i = 0u; i < 4u; i++)
    for (uint j = 0u; j < 4u; j++) {
      const uint r = r0 + tr + 16u * i, t = t0 + tt + 8u * j;
      if (r < p.rows && t < p.n) y[p.y_off + t * p.y_stride + r] = acc[i][j];
    }
}
