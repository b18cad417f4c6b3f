#version 450
// Attention over the paged KV cache (kernels/attention.h), flash-decoding style: one workgroup per
// (token, query head). It streams the token's positions 64 at a time: each invocation scores one position
// (q . k * scale, the soft-cap), the workgroup takes the chunk's maximum and rescales what it accumulated
// (online softmax in fp32), then each invocation adds its value dimensions' weighted sum over the chunk.
// Keys and values are F32, F16, BF16, Q8_0, FP8 or Q4 rows (Q8_0 and Q4 Walsh-Hadamard rotated per group: the
// query is rotated to meet the keys, and the values' weighted sum rotated back at the end); a position's slot comes from its sequence's block table. GQA: query
// head h reads KV head h / (n_head / n_kv_head). Sliding windows and chunks narrow the first position;
// a head's sink logit joins the denominator. Head and value sizes up to 1024 (MLA's latent: 576 and 512).
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, set = 0, binding = 3) buffer O { float o[]; };
// Per token: its position, where its block table starts in meta, and the last position it sees (its own, or a
// media span's last for rows attended both ways: kernels/attention.h's horizons); then the tables; then (with
// sinks) the heads' sink logits as float bits.
layout(std430, set = 0, binding = 4) readonly buffer M { int meta[]; };
layout(push_constant) uniform Params {
  uint n_head, n_kv_head, hd, vd, q_off, o_off, k_off, v_off;  // offsets in words
  uint k_stride, v_stride, block_size, meta_off;               // strides in bytes
  int window, chunk, sinks_off;                                // sinks_off < 0: none
  uint k_type, v_type;  // 0 F32, 1 F16, 2 BF16, 3 Q8_0, 4 FP8, 5 Q4
  float scale, softcap;
  uint k_group, v_group;  // Q8_0, FP8 and Q4 groups
  } p;

const uint kMaxDim = 1024u, kPerLane = kMaxDim / 64u;
shared float qs[kMaxDim];
shared float red[64];
shared float weight[64];
shared uint slot_of[64];

uint kbyte(uint b) { return (kw[p.k_off + (b >> 2)] >> ((b & 3u) * 8u)) & 0xffu; }
uint vbyte(uint b) { return (vw[p.v_off + (b >> 2)] >> ((b & 3u) * 8u)) & 0xffu; }

// In place, the orthonormal Walsh-Hadamard transform of qs[at, at + n) (ops.h walsh_hadamard).
void rotate(uint at, uint n) {
  for (uint h = 1u; h < n; h *= 2u)
    for (uint a = at; a < at + n; a += 2u * h)
      for (uint j = a; j < a + h; j++) {
        const float s = qs[j], t = qs[j + h];
        qs[j] = s + t;
        qs[j + h] = s - t;
      }
  const float norm = 1.0 / sqrt(float(n));
  for (uint j = at; j < at + n; j++) qs[j] *= norm;
}

// formats/fp8.h's E4M3 code as a float (0x7f, NaN, is never written).
float e4m3(uint c) {
  const uint ex = (c >> 3) & 15u, mant = c & 7u;
  const float v = ex == 0u ? float(mant) * 0.001953125 : (1.0 + float(mant) / 8.0) * exp2(float(ex) - 7.0);
  return (c & 0x80u) != 0u ? -v : v;
}

// Element ea of the row at byte `row` of a quantized type (kv_format.cpp dequantize; still rotated for Q8_0
// and Q4): Q8_0 (3) d * int8, FP8 (4) d * e4m3, Q4 (5) d * q + m.
float grouped(bool keys, uint type, uint group, uint row, uint ea) {
  const uint g = ea / group, j = ea % group, b = row + g * (type == 5u ? 4u + group / 2u : 2u + group);
#define BYTE(o) (keys ? kbyte(o) : vbyte(o))
  const float d = unpackHalf2x16(BYTE(b) | (BYTE(b + 1u) << 8)).x;
  if (type == 3u) return d * float(int(BYTE(b + 2u + j) << 24) >> 24);
  if (type == 4u) return d * e4m3(BYTE(b + 2u + j));
  const uint q = BYTE(b + 4u + j / 2u);
  return d * float((j & 1u) != 0u ? q >> 4 : q & 15u) + unpackHalf2x16(BYTE(b + 2u) | (BYTE(b + 3u) << 8)).x;
#undef BYTE
}

float key(uint slot, uint e) {
  const uint kvh = gl_WorkGroupID.x / (p.n_head / p.n_kv_head);
  if (p.k_type >= 3u) return grouped(true, p.k_type, p.k_group, slot * p.k_stride, kvh * p.hd + e);
  if (p.k_type == 0u) return uintBitsToFloat(kw[p.k_off + slot * (p.k_stride / 4u) + kvh * p.hd + e]);
  const uint b = slot * p.k_stride + 2u * (kvh * p.hd + e);
  const uint h = (kw[p.k_off + (b >> 2)] >> ((b & 2u) * 8u)) & 0xffffu;
  return p.k_type == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}
float value(uint slot, uint e) {
  const uint kvh = gl_WorkGroupID.x / (p.n_head / p.n_kv_head);
  if (p.v_type >= 3u) return grouped(false, p.v_type, p.v_group, slot * p.v_stride, kvh * p.vd + e);
  if (p.v_type == 0u) return uintBitsToFloat(vw[p.v_off + slot * (p.v_stride / 4u) + kvh * p.vd + e]);
  const uint b = slot * p.v_stride + 2u * (kvh * p.vd + e);
  const uint h = (vw[p.v_off + (b >> 2)] >> ((b & 2u) * 8u)) & 0xffffu;
  return p.v_type == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16);
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, lane = gl_LocalInvocationID.x;
  const int pos = meta[p.meta_off + 3u * t], table = meta[p.meta_off + 3u * t + 1u];
  const int last = meta[p.meta_off + 3u * t + 2u];
  int first = 0;
  if (p.chunk > 0) first = pos - pos % p.chunk;
  else if (p.window > 0 && pos + 1 > p.window) first = pos + 1 - p.window;
  const uint qo = p.q_off + (t * p.n_head + h) * p.hd;
  for (uint e = lane; e < p.hd; e += 64u) qs[e] = q[qo + e];
  barrier();
  if (p.k_type == 3u || p.k_type == 5u) {  // rotated keys: the query rotated to meet them
    for (uint g = lane; g < p.hd / p.k_group; g += 64u) rotate(g * p.k_group, p.k_group);
    barrier();
  }
  float m = -1.0 / 0.0, l = 0.0;
  float acc[kPerLane];
  for (uint k = 0u; k < kPerLane; k++) acc[k] = 0.0;
  for (int c = first; c <= last; c += 64) {
    const int ps = c + int(lane);
    float s = -1.0 / 0.0;
    uint slot = 0u;
    if (ps <= last) {
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
    const float w = ps <= last ? exp(s - m_new) : 0.0;
    barrier();
    weight[lane] = w;
    red[lane] = w;
    barrier();
    for (uint stride = 32u; stride > 0u; stride >>= 1) {
      if (lane < stride) red[lane] += red[lane + stride];
      barrier();
    }
    l = l * correction + red[0];
    const uint count = uint(min(64, last - c + 1));
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
  if (p.v_type == 3u || p.v_type == 5u) {  // the sum of rotated values, rotated back (qs is free now)
    for (uint k = 0u; k < kPerLane; k++)
      if (lane + 64u * k < p.vd) qs[lane + 64u * k] = acc[k];
    barrier();
    for (uint g = lane; g < p.vd / p.v_group; g += 64u) rotate(g * p.v_group, p.v_group);
    barrier();
    for (uint k = 0u; k < kPerLane; k++)
      if (lane + 64u * k < p.vd) acc[k] = qs[lane + 64u * k];
  }
  const uint oo = p.o_off + (t * p.n_head + h) * p.vd;
  for (uint k = 0u; k < kPerLane; k++) {
    const uint e = lane + 64u * k;
    if (e < p.vd) o[oo + e] = acc[k] / l;
  }
}
