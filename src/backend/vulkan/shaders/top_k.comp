#version 450
// Sampling's top-k on the device: row r's k largest floats by value descending, ties by index ascending, NaNs
// left out (kernels/ops.h top_k): ids[r * k + j] and vals[r * k + j], best first. One workgroup per row, k
// passes: each finds the best element ranked after the previous pass's (each invocation over its stride, then
// the workgroup's reduction), so the row is read k times (k <= 64).
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Ids { int ids[]; };
layout(std430, set = 0, binding = 2) buffer Vals { float vals[]; };
layout(push_constant) uniform Params {
  uint n;  // floats per row
  uint k;
  uint x_off, ids_off, vals_off;
} p;

const uint kNone = 0xffffffffu;
shared float sv[256];
shared uint si[256];

// (v, i) ranks before (w, j): larger, or equal with the smaller index.
bool before(float v, uint i, float w, uint j) { return j == kNone || v > w || (v == w && i < j); }

void main() {
  const uint row = gl_WorkGroupID.x, id = gl_LocalInvocationID.x, base = p.x_off + row * p.n;
  float last_v = 0.0;
  uint last_i = kNone;  // the previous pass's pick (none: the first pass)
  for (uint pass = 0u; pass < p.k; pass++) {
    float bv = 0.0;
    uint bi = kNone;
    for (uint i = id; i < p.n; i += 256u) {
      const float v = x[base + i];
      if (isnan(v) || (last_i != kNone && !before(last_v, last_i, v, i))) continue;  // ranked at or before the last pick
      if (before(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
    sv[id] = bv;
    si[id] = bi;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
      if (id < s && si[id + s] != kNone && before(sv[id + s], si[id + s], sv[id], si[id])) {
        sv[id] = sv[id + s];
        si[id] = si[id + s];
      }
      barrier();
    }
    last_v = sv[0];
    last_i = si[0];
    if (id == 0u) {
      ids[p.ids_off + row * p.k + pass] = last_i == kNone ? -1 : int(last_i);
      vals[p.vals_off + row * p.k + pass] = last_i == kNone ? 0.0 : last_v;
    }
    barrier();
    if (last_i == kNone) {  // nothing left (NaNs, or k > n): the rest of the list is empty too
      for (uint j = pass + 1u + id; j < p.k; j += 256u) {
        ids[p.ids_off + row * p.k + j] = -1;
        vals[p.vals_off + row * p.k + j] = 0.0;
      }
      return;
    }
  }
}
