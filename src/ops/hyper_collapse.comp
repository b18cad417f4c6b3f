#version 450
// ops/hyper_connection.h's hyper_collapse on the device: y[r][j] = sum_i pre[r][i] * x[r][i][j], over a row's hc
// streams, summed in the host kernel's order (stream 0's product first, then each next one added) without
// fused multiply-adds (precise), so each output is the host's exactly.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pre { float pre[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint x_off, pre_off, y_off;  // the buffers' float offsets in their bindings (VulkanOpContext::dispatch)
  uint n, hc, dim;             // rows, streams per row, floats per stream
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= p.n * p.dim) return;
  const uint r = i / p.dim, j = i % p.dim;
  const uint xs = p.x_off + r * p.hc * p.dim + j, ws = p.pre_off + r * p.hc;
  precise float acc = x[xs] * pre[ws];
  for (uint s = 1u; s < p.hc; s++) {
    precise float t = x[xs + s * p.dim] * pre[ws + s];
    acc = acc + t;
  }
  y[p.y_off + i] = acc;
}
