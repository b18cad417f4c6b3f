#pragma once
// The constants of Cephes' expf, shared by the SIMD exp approximations (AVX2
// exp8 in dot_avx2.cpp, AVX-512 exp16 in attention_avx512.cpp): reduce
// x = n ln2 + r with ln2 split in two for precision, then
// e^r ~ 1 + r + r^2 (p0 r^5 + p1 r^4 + ... + p5), relative error ~1e-7.
namespace kestrel::exp_cephes {

constexpr float kMaxX = 88.3762626647949f;  // e^kMaxX is the largest float
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace kestrel::exp_cephes
