#version 450
// Activations rounded as the CPU backend (and ggml) quantizes them before a product with a quantized weight
// (kernels/qdot.h activation_format), written back as floats: the matrix product then multiplies the same
// 8-bit values the CPU's integer dots do. One invocation per block of x:
//   mode 0, Q8_0/Q8_1 (32 elements): d = amax / 127 stored as fp16, q = roundEven(x * 127 / amax)
//   mode 2, Q8_1: as Q8_0, and the block's fp16(amax / 127 * sum q) at s_off + block (the minimum's term)
//   mode 3, F16 weights: each element rounded to fp16; mode 4, BF16: to bf16 (round to nearest even)
//   mode 1, Q8_K (256 elements): iscale = -127 / (the element of largest magnitude, signed),
//           q = min(127, roundEven(iscale * x)), d = 1 / iscale (fp32)
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint mode, blocks, x_off, y_off, s_off;
  uint cols, x_stride;  // the input's rows: cols floats, x_stride apart (the output's are back to back)
} p;

// Where flattened element i of the input is.
uint at(uint i) { return p.x_off + (i / p.cols) * p.x_stride + i % p.cols; }

void main() {
  const uint b = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (b >= p.blocks) return;
  if (p.mode == 3u) {
    y[p.y_off + b] = unpackHalf2x16(packHalf2x16(vec2(x[at(b)], 0.0))).x;
    return;
  }
  if (p.mode == 4u) {
    uint v = floatBitsToUint(x[at(b)]);
    if ((v & 0x7fffffffu) > 0x7f800000u)
      v = (v | 0x00400000u) & 0xffff0000u;  // NaN stays NaN
    else
      v = (v + 0x7fffu + ((v >> 16) & 1u)) & 0xffff0000u;
    y[p.y_off + b] = uintBitsToFloat(v);
    return;
  }
  if (p.mode != 1u) {
    const uint xo = at(32u * b), yo = p.y_off + 32u * b;
    float amax = 0.0;
    for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(x[xo + i]));
    const float d32 = amax / 127.0, d = unpackHalf2x16(packHalf2x16(vec2(d32, 0.0))).x;
    const float id = amax != 0.0 ? 127.0 / amax : 0.0;
    float sum = 0.0;
    for (uint i = 0u; i < 32u; i++) {
      const float q = roundEven(x[xo + i] * id);
      y[yo + i] = q * d;
      sum += q;
    }
    if (p.mode == 2u) y[p.s_off + b] = unpackHalf2x16(packHalf2x16(vec2(d32 * sum, 0.0))).x;
  } else {
    const uint xo = at(256u * b), yo = p.y_off + 256u * b;
    float amax = 0.0, mx = 0.0;
    for (uint i = 0u; i < 256u; i++)
      if (abs(x[xo + i]) > amax) {
        amax = abs(x[xo + i]);
        mx = x[xo + i];
      }
    if (amax == 0.0) {
      for (uint i = 0u; i < 256u; i++) y[yo + i] = 0.0;
      return;
    }
    const float iscale = -127.0 / mx, d = 1.0 / iscale;
    for (uint i = 0u; i < 256u; i++) y[yo + i] = min(127.0, roundEven(iscale * x[xo + i])) * d;
  }
}
