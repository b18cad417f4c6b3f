#version 450
// ops/sigmoid_gate.h on the device: x[i] *= sigmoid(g[i / per_gate]) for i < n, as the host kernel computes it.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer G { float g[]; };
layout(push_constant) uniform Params {
  uint x_off, g_off;  // the buffers' float offsets in their bindings (VulkanOpContext::dispatch)
  uint n, per_gate;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= p.n) return;
  x[p.x_off + i] *= 1.0 / (1.0 + exp(-g[p.g_off + i / p.per_gate]));
}
