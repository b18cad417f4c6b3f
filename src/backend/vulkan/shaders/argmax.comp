#version 450
// Greedy sampling on the device: ids[r] = the index of the largest float of row r, the first of equal ones,
// a NaN never larger (kernels/ops.h's argmax: x[0] a NaN gives 0). One workgroup per row: each invocation
// scans a stride of the row in order, then the workgroup keeps the larger (or, equal, the earlier) of pairs.
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Ids { int ids[]; };
layout(push_constant) uniform Params {
  uint n;        // floats per row
  uint x_off;    // floats
  uint ids_off;  // ints
} p;

const uint kNone = 0xffffffffu;
shared float sv[256];
shared uint si[256];

void main() {
  const uint row = gl_WorkGroupID.x, id = gl_LocalInvocationID.x, base = p.x_off + row * p.n;
  float bv = 0.0;
  uint bi = kNone;
  for (uint i = id; i < p.n; i += 256u) {
    const float v = x[base + i];
    if (!isnan(v) && (bi == kNone || v > bv)) {
      bv = v;
      bi = i;
    }
  }
  sv[id] = bv;
  si[id] = bi;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (id < s) {
      const float v = sv[id + s];
      const uint i = si[id + s];
      if (i != kNone && (si[id] == kNone || v > sv[id] || (v == sv[id] && i < si[id]))) {
        sv[id] = v;
        si[id] = i;
      }
    }
    barrier();
  }
  if (id == 0u) ids[p.ids_off + row] = isnan(x[base]) || si[0] == kNone ? 0 : int(si[0]);
}
