#pragma once
// Tight loops of one instruction family with many independent accumulators,
// used to measure a core's peak throughput. Each returns a value derived from
// its accumulators so the compiler cannot drop the work.
#include <cstdint>

namespace kestrel::peak {

// Operations performed per loop iteration by each kernel (a multiply-add counts as 2).
constexpr double kF32FmaOpsAvx512 = 12.0 * 16 * 2;
constexpr double kF32FmaOpsAvx2 = 12.0 * 8 * 2;
constexpr double kInt8OpsVnni512 = 12.0 * 64 * 2;
constexpr double kInt8OpsAvx2 = 12.0 * 32 * 2;
constexpr double kBf16OpsAvx512 = 12.0 * 32 * 2;
// AMX: 4 tile products of 16 x 16 outputs, each over 64 int8 (32 bf16 pairs: 64 products) per iteration.
constexpr double kInt8OpsAmx = 4.0 * 16 * 16 * 64 * 2;
constexpr double kBf16OpsAmx = 4.0 * 16 * 16 * 32 * 2;

float f32_fma_avx512(int64_t iterations);
float f32_fma_avx2(int64_t iterations);
int32_t int8_dot_vnni512(int64_t iterations);
int32_t int8_dot_avx2(int64_t iterations);
float bf16_dot_avx512(int64_t iterations);
// hw/peak_amx.cpp (builds with the AMX kernels; callers check amx_state().usable).
int32_t int8_dot_amx(int64_t iterations);
float bf16_dot_amx(int64_t iterations);
// Sums n floats with wide loads (the read-bandwidth probe's inner loop).
float sum_floats(const float* p, int64_t n);

}  // namespace kestrel::peak
