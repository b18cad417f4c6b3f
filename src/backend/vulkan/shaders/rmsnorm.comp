#version 450
// y row = x row / rms(x row) * w (ops.h rmsnorm_rows), one workgroup per row. Rows may be shorter than the
// buffer's stride (Qwen3's per-head norms: dim = head_dim, the rows back to back).
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint rows, dim, x_off, y_off, w_off, groups_x;
  float eps;
} p;
shared float partial[64];

void main() {
  const uint r = gl_WorkGroupID.y * p.groups_x + gl_WorkGroupID.x;
  if (r >= p.rows) return;
  const uint tid = gl_LocalInvocationID.x, xo = p.x_off + r * p.dim, yo = p.y_off + r * p.dim;
  float s = 0.0;
  for (uint i = tid; i < p.dim; i += 64u) s += x[xo + i] * x[xo + i];
  partial[tid] = s;
  barrier();
  for (uint stride = 32u; stride > 0u; stride >>= 1) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    barrier();
  }
  const float scale = 1.0 / sqrt(partial[0] / float(p.dim) + p.eps);
  // x may be y (in place): every invocation has read what it needs for the sum above.
  for (uint i = tid; i < p.dim; i += 64u) y[yo + i] = w[p.w_off + i] * (x[xo + i] * scale);
}
