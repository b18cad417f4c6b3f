#version 450
// ops/hyper_connection.h's hyper_expand on the device: out[r][dst][j] = y[r][j] * post[r][dst]
// + sum_src comb[r][dst + src * hc] * x[r][src][j], summed in the host kernel's order without fused
// multiply-adds (precise), so each output is the host's exactly. out must not alias x.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Yb { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer Post { float post[]; };
layout(std430, set = 0, binding = 3) readonly buffer Comb { float comb[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Out { float o[]; };
layout(push_constant) uniform Params {
  uint x_off, y_off, post_off, comb_off, out_off;  // the buffers' float offsets (VulkanOpContext::dispatch)
  uint n, hc, dim;                                 // rows, streams per row, floats per stream
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= p.n * p.hc * p.dim) return;
  const uint r = i / (p.hc * p.dim), dst = (i / p.dim) % p.hc, j = i % p.dim;
  const uint cs = p.comb_off + r * p.hc * p.hc + dst, xs = p.x_off + r * p.hc * p.dim + j;
  precise float acc = y[p.y_off + r * p.dim + j] * post[p.post_off + r * p.hc + dst];
  for (uint s = 0u; s < p.hc; s++) {
    precise float t = x[xs + s * p.dim] * comb[cs + s * p.hc];
    acc = acc + t;
  }
  o[p.out_off + i] = acc;
}
