#version 450
// Causal attention over the paged KV cache (kernels/attention.h), flash-decoding style: one workgroup per
// (token, query head). It streams the token's positions 64 at a time: each invocation scores one position
// (q . k * scale, the soft-cap), the workgroup takes the chunk's maximum and rescales what it accumulated
// (online softmax in fp32), then each invocation adds its value dimensions' weighted sum over the chunk.
// Keys and values are F32, F16 or BF16 rows; a position's slot comes from its sequence's block table. GQA: query
// head h reads KV head h / (n_head / n_kv_head). Sliding windows and chunks narrow the first position;
// a head's sink logit joins the denominator. Head and value sizes up to 1024 (MLA's latent: 576 and 512).
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, set = 0, binding = 3) buffer O { float o[]; };
// Per token: its position and where its block table starts in meta; then the tables; then (with sinks) the
// heads' sink logits as float bits.
layout(std430, set = 0, binding = 4) readonly buffer M { int meta[]; };
layout(push_constant) uniform Params {
  uint n_head, n_kv_head, hd, vd, q_off, o_off, k_off, v_off;  // offsets in words
  uint k_stride, v_stride, block_size, meta_off;               // strides in bytes
  int window, chunk, sinks_off;                                // sinks_off < 0: none
  uint k_type, v_type;  // 0 F32, 1 F16, 2 BF16
  float scale, softcap;
} p;

const uint kMaxDim = 1024u, kPerLane = kMaxDim / 64u;
shared float qs[kMaxDim];
shared float red[64];
shared float weight[64];
shared uint slot_of[64];

float key(uint slot, uint e) {
  const uint kvh = gl_WorkGroupID.x / (p.n_head / p.n_kv_head);
  if (p.k_type == 0u) return uintBitsToFloat(kw[p.k_off + slot * (p.k_stride / 4u) + kvh * p.hd + e]);
  const uint b = slot * p.k_stride + 2u * (kvh * p.hd + e);
  const uint h = (kw[p.k_off + (b >> 2)] >> ((b & 2u) * 8u)) & 0xffffu;
  return p.k_type == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}
float value(uint slot, uint e) {
  const uint kvh = gl_WorkGroupID.x / (p.n_head / p.n_kv_head);
  if (p.v_type == 0u) return uintBitsToFloat(vw[p.v_off + slot * (p.v_stride / 4u) + kvh * p.vd + e]);
  const uint b = slot * p.v_stride + 2u * (kvh * p.vd + e);
  const uint h = (vw[p.v_off + (b >> 2)] >> ((b & 2u) * 8u)) & 0xffffu;
  return p.v_type == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  const int pos = meta[p.meta_off + 2u * t], table = meta[p.meta_off + 2u * t + 1u];
  int first = 0;
  if (p.chunk > 0) first = pos - pos % p.chunk;
  else if (p.window > 0 && pos + 1 > p.window) first = pos + 1 - p.window;
  const uint qo = p.q_off + (t * p.n_head + h) * p.hd;
  for (uint e = lane; e < p.hd; e += 64u) qs[e] = q[qo + e];
  barrier();
  float m = -1.0 / 0.0, l = 0.0;
  float acc[kPerLane];
  for (uint k = 0u; k < kPerLane; k++) acc[k] = 0.0;
  for (int c = first; c <= pos; c += 64) {
    const int ps = c + int(lane);
    float s = -1.0 / 0.0;
    uint slot = 0u;
    if (ps <= pos) {
      slot = uint(meta[table + ps / int(p.block_size)]) * p.block_size + uint(ps % int(p.block_size));
      float d = 0.0;
      for (uint e = 0u; e < p.hd; e++) d += qs[e] * key(slot, e);
      s = d * p.scale;
      if (p.softcap > 0.0) s = p.softcap * tanh(s / p.softcap);
    }
    slot_of[lane] = slot;
    red[lane] = s;
    barrier();
    for (uint stride = 32u; stride > 0u; stride >>= 1) {
      if (lane < stride) red[lane] = max(red[lane], red[lane + stride]);
      barrier();
    }
    const float m_new = max(m, red[0]);
    const float correction = exp(m - m_new);
    const float w = ps <= pos ? exp(s - m_new) : 0.0;
    barrier();
    weight[lane] = w;
    red[lane] = w;
    barrier();
    for (uint stride = 32u; stride > 0u; stride >>= 1) {
      if (lane < stride) red[lane] += red[lane + stride];
      barrier();
    }
    l = l * correction + red[0];
    const uint count = uint(min(64, pos - c + 1));
    for (uint k = 0u; k < kPerLane; k++) {
      const uint e = lane + 64u * k;
      if (e >= p.vd) break;
      float a = acc[k] * correction;
      for (uint j = 0u; j < count; j++) a += weight[j] * value(slot_of[j], e);
      acc[k] = a;
    }
    m = m_new;
    barrier();
  }
  if (p.sinks_off >= 0) l += exp(intBitsToFloat(meta[p.sinks_off + int(h)]) - m);
  const uint oo = p.o_off + (t * p.n_head + h) * p.vd;
  for (uint k = 0u; k < kPerLane; k++) {
    const uint e = lane + 64u * k;
    if (e < p.vd) o[oo + e] = acc[k] / l;
  }
}
