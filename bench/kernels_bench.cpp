// Google Benchmark suite for the kernels: GB/s of weights streamed (decode
// shapes, one token) and GFLOP/s (prefill shapes, many tokens), per weight
// format and kernel path. Run: build/bench/kestrel_kernel_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/block_formats.h"
#include "core/thread_pool.h"
#include "hw/peak_kernels.h"
#include "kernels/attention.h"
#include "kernels/dot.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kernels.h"
#include "kernels/packed_q8.h"

namespace kestrel {
namespace {

struct WeightBuffer {
  std::vector<uint8_t> bytes;
  Weight w;
};

WeightBuffer make_weight(GgmlType type, int64_t rows, int64_t cols) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  WeightBuffer b;
  const size_t rb = row_bytes(type, cols);
  b.bytes.resize(rb * rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; r++) {
    for (auto& x : row) x = d(rng);
    quantize_row(type, row.data(), b.bytes.data() + r * rb, cols);
  }
  b.w = Weight{"bench", type, {cols, rows}, b.bytes.data(), b.bytes.size(), {}, {}};
  return b;
}

// args: type, rows, cols, tokens, threads, isa (0 scalar, 1 avx2, 2 avx512,
// 3 avx512 with the weights repacked as the engine does by default, 4 avx2 repacked)
void BM_Matmul(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  const bool repack = state.range(5) >= 3;
  const auto isa = state.range(5) == 3 ? IsaLevel::Avx512
                   : state.range(5) == 4 ? IsaLevel::Avx2
                                         : static_cast<IsaLevel>(state.range(5));
  const MatmulKernels& kernels = matmul_kernels_for(isa);
  if (static_cast<int>(isa) > static_cast<int>(selected_isa()) || (repack && !kernels.repacks(type))) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  WeightBuffer wb = make_weight(type, rows, cols);
  if (repack) wb.w.packed = pack_weight(wb.w);
  std::vector<float> x(n * cols, 0.5f), y(n * rows);
  ThreadPool pool(threads);
  Matmul mm(kernels);
  for (auto _ : state) {
    mm.run(pool, wb.w, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * wb.bytes.size(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * rows * cols * n / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(type_name(type)) + " " + isa_name(isa) + " " + kernels.name(type, repack));
}

void MatmulShapes(benchmark::internal::Benchmark* b) {
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  for (auto type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0})
    for (int isa : {1, 2, 3}) {
      if (isa == 3 && type != GgmlType::Q8_0 && type != GgmlType::Q4_0) continue;
      // TinyLlama FFN up-projection: decode (1 token) and prefill (64 tokens).
      b->Args({static_cast<int64_t>(type), 5632, 2048, 1, threads, isa});
      b->Args({static_cast<int64_t>(type), 5632, 2048, 64, threads, isa});
      // The output head (vocab 32000): large enough to stream from DRAM.
      b->Args({static_cast<int64_t>(type), 32000, 2048, 1, threads, isa});
      if (type == GgmlType::Q4_0) b->Args({static_cast<int64_t>(type), 32000, 2048, 1, 1, isa});
    }
  // k-quants and FP8 run the best table this CPU has (kquant_dots()), whatever the isa argument (2); the
  // k-quants' batches also repacked (3), against Q4_0's above.
  for (int64_t tokens : {1, 64}) b->Args({static_cast<int64_t>(GgmlType::KESTREL_FP8_E4M3), 5632, 2048, tokens, threads, 2});
  for (auto type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    for (int isa : {2, 3}) b->Args({static_cast<int64_t>(type), 5632, 2048, 64, threads, isa});
  // The other block formats at the decode shapes against Q4_0's (above): the file layout's row dot (isa 2)
  // and the engine's default (3: repacked).
  for (auto type : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::MXFP4,
                    GgmlType::IQ4_XS, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    for (int isa : {2, 3}) {
      b->Args({static_cast<int64_t>(type), 5632, 2048, 1, threads, isa});
      b->Args({static_cast<int64_t>(type), 32000, 2048, 1, threads, isa});
      b->Args({static_cast<int64_t>(type), 2048, 5632, 1, threads, isa});  // ffn_down
      b->Args({static_cast<int64_t>(type), 32000, 2048, 1, 1, isa});        // per core
    }
  // The IQ1-IQ3 lattice types (row dots; not repacked), one thread: compute-bound, compare per core.
  for (auto type : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                    GgmlType::IQ1_S, GgmlType::IQ1_M})
    for (int isa : {1, 2}) b->Args({static_cast<int64_t>(type), 5632, 2048, 1, 1, isa});
}
BENCHMARK(BM_Matmul)->Apply(MatmulShapes)->Unit(benchmark::kMillisecond)->UseRealTime();

// The repacked kernels per core at a prefill shape (2048 x 2048, 128 tokens), AVX2 (4) against AVX-512 VNNI
// (3): every kind, GFLOP/s counts int8 multiply-adds as 2.
void PackedPrefillShapes(benchmark::internal::Benchmark* b) {
  for (auto type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                    GgmlType::MXFP4, GgmlType::IQ4_XS, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                    GgmlType::Q6_K})
    for (int isa : {4, 3}) b->Args({static_cast<int64_t>(type), 2048, 2048, 128, 1, isa});
}
BENCHMARK(BM_Matmul)->Name("BM_PackedPrefill")->Apply(PackedPrefillShapes)->Unit(benchmark::kMillisecond)->UseRealTime();

// Decode as a model runs it: one token through a sequence of distinct
// matrices (copies of one, repacked, 512 MiB in all) so that every call reads
// its weights from DRAM, with the pool's barrier per call (the BM_Matmul rows
// above re-read one matrix that largely fits in the caches). Each iteration
// also reads another copy's bytes with the bandwidth probe's loop, timed
// apart: on a shared machine whose bandwidth drifts by tens of percent within
// minutes, only this interleaving gives a meaningful ratio ("of_read": the
// kernel's share of what plain reading gets). args: type, rows, cols, threads.
void BM_MatmulStream(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2);
  if (!matmul_kernels().repacks(type)) {
    state.SkipWithError("no repacked kernels on this CPU");
    return;
  }
  WeightBuffer wb = make_weight(type, rows, cols);
  const size_t copies = std::max<size_t>(4, (size_t{512} << 20) / wb.bytes.size());
  ThreadPool pool(static_cast<int>(state.range(3)));
  std::vector<Weight> ws(copies, wb.w);
  for (auto& w : ws) w.packed = pack_weight(wb.w, &pool);
  std::vector<float> x(cols, 0.5f), y(rows), partial(static_cast<size_t>(pool.size()));
  Matmul mm(matmul_kernels_for(IsaLevel::Avx512));
  double kernel_seconds = 0, read_seconds = 0, read_bytes = 0;
  size_t i = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    mm.run(pool, ws[i % copies], x.data(), 1, y.data());
    const auto t1 = Clock::now();
    benchmark::DoNotOptimize(y.data());
    const PackedWeight& other = *ws[(i + copies / 2) % copies].packed;
    const int64_t n = other.n_groups * static_cast<int64_t>(other.group_bytes()) / static_cast<int64_t>(sizeof(float));
    const float* f = reinterpret_cast<const float*>(other.data);
    pool.run([&](int ti, int nt) { partial[ti] = peak::sum_floats(f + n * ti / nt, n * (ti + 1) / nt - n * ti / nt); });
    benchmark::DoNotOptimize(partial.data());
    read_seconds += std::chrono::duration<double>(Clock::now() - t1).count();
    read_bytes += static_cast<double>(n) * sizeof(float);
    const double kernel = std::chrono::duration<double>(t1 - t0).count();
    kernel_seconds += kernel;
    state.SetIterationTime(kernel);
    i++;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * wb.bytes.size(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  // GB/s counts the file's bytes (the roofline's); the read and the ratio the repacked bytes, which the
  // kernel streams (the k-quants' a few percent more), over the same number of calls.
  state.counters["read_GB/s"] = read_bytes / read_seconds / 1e9;
  state.counters["of_read"] = read_seconds / kernel_seconds;
  state.SetLabel(std::string(type_name(type)) + " repacked, " + std::to_string(copies) + " copies");
}

void StreamShapes(benchmark::internal::Benchmark* b) {
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int t : {1, threads})
    for (auto type : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5632, 2048}, {2048, 5632}})
        b->Args({static_cast<int64_t>(type), rows, cols, t});
}
BENCHMARK(BM_MatmulStream)->Apply(StreamShapes)->UseManualTime();

void BM_Dot(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const auto isa = static_cast<IsaLevel>(state.range(1));
  if (static_cast<int>(isa) > static_cast<int>(selected_isa())) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  const DotKernels& k = dot_kernels_for(isa);
  const int64_t n = 4096;
  WeightBuffer wb = make_weight(type, 1, n);
  std::vector<float> x(n, 0.25f);
  std::vector<BlockQ8_0> xq(n / 32);
  k.quantize_q8_0(x.data(), xq.data(), n);
  float sink = 0;
  for (auto _ : state) {
    switch (type) {
      case GgmlType::F32: sink += k.dot_f32(static_cast<const float*>(wb.w.data), x.data(), n); break;
      case GgmlType::F16: sink += k.dot_f16_f32(static_cast<const uint16_t*>(wb.w.data), x.data(), n); break;
      case GgmlType::Q8_0: sink += k.dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(wb.w.data), xq.data(), n); break;
      default: sink += k.dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(wb.w.data), xq.data(), n); break;
    }
    benchmark::DoNotOptimize(sink);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * wb.bytes.size(),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(std::string(type_name(type)) + " " + isa_name(isa));
}
BENCHMARK(BM_Dot)->ArgsProduct({{0, 1, 8, 2}, {0, 1, 2}});

void BM_AttentionDecode(benchmark::State& state) {
  // One query token over `ctx` cached positions, TinyLlama heads (32 q, 4 kv, 64 dims).
  const int64_t ctx = state.range(0);
  const int block = 16, hd = 64, n_head = 32, n_kv = 4;
  const int64_t blocks = (ctx + block) / block;
  std::vector<float> k(blocks * block * n_kv * hd, 0.01f), v(k.size(), 0.02f), q(n_head * hd, 0.1f), out(q.size());
  std::vector<int32_t> table(blocks);
  for (int64_t i = 0; i < blocks; i++) table[i] = static_cast<int32_t>(i);
  const int32_t* tables[1] = {table.data()};
  const int32_t pos = static_cast<int32_t>(ctx - 1);
  ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()));
  for (auto _ : state) {
    attention_paged(pool, PagedKvLayerView::f32(k.data(), v.data(), n_kv * hd, n_kv * hd, block), {1, q.data(), out.data(), &pos, tables},
                    {n_head, n_kv, hd, 0.125f});
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * ctx * n_kv * hd * 4,
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttentionDecode)->Arg(512)->Arg(4096)->UseRealTime();

// Writing a weight type (one thread), with an importance row: weights/s.
// args: ggml type id. The IQ1-IQ3 writers search a lattice and are the slow ones.
void BM_QuantizeRow(benchmark::State& state) {
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t n = 4096;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::uniform_real_distribution<float> u(0.1f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n)), imp(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  for (auto& v : imp) v = u(rng);
  std::vector<uint8_t> q(row_bytes(type, n));
  quantize_row(type, x.data(), q.data(), n, imp.data());  // builds the lattice tables outside the timing
  for (auto _ : state) {
    quantize_row(type, x.data(), q.data(), n, imp.data());
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(std::string(type_name(type)));
}
BENCHMARK(BM_QuantizeRow)->DenseRange(16, 22)->Arg(29)->Arg(12)->Arg(10)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kestrel

BENCHMARK_MAIN();
