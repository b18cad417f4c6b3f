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

#include "weights.glsl"  // (first: it says whether the type has a block minimum, BLOCK_MIN)

const uint kRows = 64u, kTokens = 32u;
shared float ws[kRows][33];  // one unit of the tile's rows, dequantized (33: no bank conflicts down a column)
shared float xt[kTokens][33];
#ifdef BLOCK_MIN
shared float wmin[kRows];
shared float xsum[kTokens];
#endif
#define PUT_W(r, i, v) ws[r][i] = (v)
#define PUT_X(t, i, v) xt[t][i] = (v)
#define PUT_MIN(r, v) wmin[r] = (v)
#define PUT_SUM(t, v) xsum[t] = (v)
#include "product.glsl"

void main() {
  const uint id = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * kRows, t0 = gl_WorkGroupID.y * kTokens;
  const uint units = (p.cols + 31u) / 32u;
  const uint tr = id % 16u, tt = id / 16u;  // this invocation's rows tr + 16i and tokens tt + 8j
  float acc[4][4];
  for (uint i = 0u; i < 4u; i++)
    for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
  for (uint u = 0u; u < units; u++) {
    load_unit(id, u, r0, t0, units);
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
