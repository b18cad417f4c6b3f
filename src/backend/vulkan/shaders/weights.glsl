// Reading GGUF weight blocks in place: the weight buffer is bound as 32-bit words and every block is read
// byte by byte from its offset (blocks are 17 to 210 bytes, not word-aligned), so no 8- or 16-bit storage
// feature is needed. unit32(base, u, v) dequantizes elements [32u, 32u + 32) of the row starting at byte
// `base` into v, as formats/ dequantizes them (the CPU backend's reference). TYPE_* picks the format. Q4_1 and
// Q5_1 leave out their block minimum (unit_min): the product adds it times the activations' block sum, as
// ggml's Q8_1 dot does.
#ifndef WEIGHTS_GLSL
#define WEIGHTS_GLSL
layout(std430, set = 0, binding = 0) readonly buffer Weights { uint wq[]; };

uint b8(uint off) { return (wq[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }
int i8(uint off) { return int(b8(off) << 24) >> 24; }
uint u16(uint off) { return b8(off) | (b8(off + 1u) << 8); }
float f16(uint off) { return unpackHalf2x16(u16(off)).x; }
uint u32(uint off) { return u16(off) | (u16(off + 2u) << 16); }

const float kIq4nl[16] = float[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
const float kMxfp4[16] = float[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);

// Q4_K/Q5_K: scale and min of sub-block j from the 12 packed bytes at s.
void scale_min_k4(uint s, uint j, out float sc, out float m) {
  if (j < 4u) {
    sc = float(b8(s + j) & 63u);
    m = float(b8(s + j + 4u) & 63u);
  } else {
    sc = float((b8(s + j + 4u) & 0xfu) | ((b8(s + j - 4u) >> 6) << 4));
    m = float((b8(s + j + 4u) >> 4) | ((b8(s + j) >> 6) << 4));
  }
}

#if defined(TYPE_F32)
const uint kBlockElems = 1u, kBlockBytes = 4u;
#elif defined(TYPE_F16) || defined(TYPE_BF16)
const uint kBlockElems = 1u, kBlockBytes = 2u;
#elif defined(TYPE_Q4_0) || defined(TYPE_IQ4_NL)
#define BLOCK32 1
const uint kBlockElems = 32u, kBlockBytes = 18u;
#elif defined(TYPE_Q4_1)
#define BLOCK32 1
const uint kBlockElems = 32u, kBlockBytes = 20u;
#elif defined(TYPE_Q5_0)
#define BLOCK32 1
const uint kBlockElems = 32u, kBlockBytes = 22u;
#elif defined(TYPE_Q5_1)
#define BLOCK32 1
const uint kBlockElems = 32u, kBlockBytes = 24u;
#elif defined(TYPE_Q8_0)
#define BLOCK32 1
const uint kBlockElems = 32u, kBlockBytes = 34u;
#elif defined(TYPE_MXFP4)
#define BLOCK32 1
const uint kBlockElems = 32u, kBlockBytes = 17u;
#elif defined(TYPE_Q2_K)
const uint kBlockElems = 256u, kBlockBytes = 84u;
#elif defined(TYPE_Q3_K)
const uint kBlockElems = 256u, kBlockBytes = 110u;
#elif defined(TYPE_Q4_K)
const uint kBlockElems = 256u, kBlockBytes = 144u;
#elif defined(TYPE_Q5_K)
const uint kBlockElems = 256u, kBlockBytes = 176u;
#elif defined(TYPE_Q6_K)
const uint kBlockElems = 256u, kBlockBytes = 210u;
#elif defined(TYPE_IQ4_XS)
const uint kBlockElems = 256u, kBlockBytes = 136u;
#else
#error "no TYPE_ defined"
#endif

#if defined(TYPE_Q4_1) || defined(TYPE_Q5_1)
#define BLOCK_MIN 1
float unit_min(uint base, uint u) { return f16(base + u * kBlockBytes + 2u); }
#endif

// Elements [32u, 32u + 32) of the row at byte `base` (cols elements; the float types' last unit may be short:
// its missing elements read as 0).
void unit32(uint base, uint u, uint cols, out float v[32]) {
#if defined(TYPE_F32) || defined(TYPE_F16) || defined(TYPE_BF16)
  for (uint i = 0u; i < 32u; i++) {
    const uint e = 32u * u + i;
    if (e >= cols) {
      v[i] = 0.0;
      continue;
    }
#if defined(TYPE_F32)
    v[i] = uintBitsToFloat(wq[(base >> 2) + e]);
#elif defined(TYPE_F16)
    const uint a = base + 2u * e;  // 2-aligned: the low or the high half of its word
    v[i] = unpackHalf2x16(wq[a >> 2] >> ((a & 2u) * 8u)).x;
#else
    v[i] = uintBitsToFloat(u16(base + 2u * e) << 16);
#endif
  }
#elif BLOCK32
  const uint o = base + u * kBlockBytes;
#if defined(TYPE_Q8_0)
  const float d = f16(o);
  for (uint i = 0u; i < 32u; i++) v[i] = d * float(i8(o + 2u + i));
#elif defined(TYPE_MXFP4)
  const uint e = b8(o);
  const float d = e < 2u ? uintBitsToFloat(0x00200000u << e) : uintBitsToFloat((e - 1u) << 23);
  for (uint j = 0u; j < 16u; j++) {
    const uint q = b8(o + 1u + j);
    v[j] = d * kMxfp4[q & 0xfu];
    v[j + 16u] = d * kMxfp4[q >> 4];
  }
#else
  const float d = f16(o);
#if defined(TYPE_Q4_0)
  for (uint j = 0u; j < 16u; j++) {
    const uint q = b8(o + 2u + j);
    v[j] = d * (float(q & 0xfu) - 8.0);
    v[j + 16u] = d * (float(q >> 4) - 8.0);
  }
#elif defined(TYPE_IQ4_NL)
  for (uint j = 0u; j < 16u; j++) {
    const uint q = b8(o + 2u + j);
    v[j] = d * kIq4nl[q & 0xfu];
    v[j + 16u] = d * kIq4nl[q >> 4];
  }
#elif defined(TYPE_Q4_1)
  for (uint j = 0u; j < 16u; j++) {
    const uint q = b8(o + 4u + j);
    v[j] = d * float(q & 0xfu);
    v[j + 16u] = d * float(q >> 4);
  }
#elif defined(TYPE_Q5_0)
  const uint qh = u32(o + 2u);
  for (uint j = 0u; j < 16u; j++) {
    const uint q = b8(o + 6u + j);
    v[j] = d * (float((q & 0xfu) | (((qh >> j) << 4) & 0x10u)) - 16.0);
    v[j + 16u] = d * (float((q >> 4) | ((qh >> (j + 12u)) & 0x10u)) - 16.0);
  }
#elif defined(TYPE_Q5_1)
  const uint qh = u32(o + 4u);
  for (uint j = 0u; j < 16u; j++) {
    const uint q = b8(o + 8u + j);
    v[j] = d * float((q & 0xfu) | (((qh >> j) << 4) & 0x10u));
    v[j + 16u] = d * float((q >> 4) | ((qh >> (j + 12u)) & 0x10u));
  }
#endif
#endif
#else
  // The k-quants and IQ4_XS: 256-element super-blocks; u is sub-block u % 8 of super-block u / 8.
  const uint o = base + (u >> 3) * kBlockBytes, j = u & 7u;
#if defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  const float d = f16(o), dmin = f16(o + 2u);
  float sc, m;
  scale_min_k4(o + 4u, j, sc, m);
  const float dl = d * sc, ml = dmin * m;
#if defined(TYPE_Q4_K)
  const uint qs = o + 16u + 32u * (j >> 1);
  for (uint l = 0u; l < 32u; l++) v[l] = dl * float((j & 1u) == 0u ? b8(qs + l) & 0xfu : b8(qs + l) >> 4) - ml;
#else
  const uint qs = o + 48u + 32u * (j >> 1), qh = o + 16u;
  for (uint l = 0u; l < 32u; l++) {
    const uint low = (j & 1u) == 0u ? b8(qs + l) & 0xfu : b8(qs + l) >> 4;
    v[l] = dl * float(low + (((b8(qh + l) >> j) & 1u) << 4)) - ml;
  }
#endif
#elif defined(TYPE_Q6_K)
  // ql[128] qh[64] scales[16] d: half h = j / 4, quarter k = j % 4.
  const uint h = j >> 2, k = j & 3u;
  const float d = f16(o + 208u);
  for (uint l = 0u; l < 32u; l++) {
    const uint ql = b8(o + 64u * h + l + ((k & 1u) != 0u ? 32u : 0u));
    const uint low = k < 2u ? ql & 0xfu : ql >> 4;
    const uint high = (b8(o + 128u + 32u * h + l) >> (2u * k)) & 3u;
    v[l] = d * float(i8(o + 192u + 8u * h + (l >> 4) + 2u * k)) * (float(low | (high << 4)) - 32.0);
  }
#elif defined(TYPE_Q2_K)
  // scales[16] qs[64] d dmin: element 128h + 32k + l is (qs[32h + l] >> 2k) & 3, sub-block 8h + 2k + l / 16.
  const uint h = j >> 2, k = j & 3u;
  const float d = f16(o + 80u), dmin = f16(o + 82u);
  for (uint l = 0u; l < 32u; l++) {
    const uint sc = b8(o + 8u * h + 2u * k + (l >> 4));
    v[l] = d * float(sc & 0xfu) * float((b8(o + 16u + 32u * h + l) >> (2u * k)) & 3u) - dmin * float(sc >> 4);
  }
#elif defined(TYPE_Q3_K)
  // hmask[32] qs[64] scales[12] d.
  const uint h = j >> 2, k = j & 3u;
  const float d = f16(o + 108u);
  for (uint l = 0u; l < 32u; l++) {
    const uint s = 8u * h + 2u * k + (l >> 4);
    const uint low4 = s < 8u ? b8(o + 96u + s) & 0xfu : b8(o + 96u + s - 8u) >> 4;
    const int sc = int(low4 | (((b8(o + 96u + 8u + (s & 3u)) >> (2u * (s >> 2))) & 3u) << 4)) - 32;
    const int q = int((b8(o + 32u + 32u * h + l) >> (2u * k)) & 3u) - (((b8(o + l) >> j) & 1u) != 0u ? 0 : 4);
    v[l] = d * float(sc) * float(q);
  }
#elif defined(TYPE_IQ4_XS)
  // d scales_h(16 bits) scales_l[4] qs[128].
  const float d = f16(o);
  const uint ls = ((b8(o + 4u + (j >> 1)) >> (4u * (j & 1u))) & 0xfu) | (((u16(o + 2u) >> (2u * j)) & 3u) << 4);
  const float dl = d * (float(ls) - 32.0);
  const uint qs = o + 8u + 16u * j;
  for (uint l = 0u; l < 16u; l++) {
    const uint q = b8(qs + l);
    v[l] = dl * kIq4nl[q & 0xfu];
    v[l + 16u] = dl * kIq4nl[q >> 4];
  }
#endif
#endif
}
#endif
