// kestrel tune: measure the tiled kernels' tile parameters on this machine
// and store the fastest in the per-machine tuning file that later runs load.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cli/commands.h"
#include "formats/block_formats.h"
#include "core/error.h"
#include "hw/tuning.h"
#include "hw/cpu_features.h"
#include "kernels/matmul.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {
namespace {

struct Candidate {
  int64_t chunk;
  double gflops;
};

// A TinyLlama FFN-sized weight of the given type with deterministic values.
std::vector<uint8_t> make_weight(GgmlType type, int64_t rows, int64_t cols) {
  std::vector<uint8_t> bytes(row_bytes(type, cols) * rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) row[c] = std::sin(static_cast<float>(r * 31 + c)) * 0.02f;
    quantize_row(type, row.data(), bytes.data() + r * row_bytes(type, cols), cols);
  }
  return bytes;
}

std::vector<Candidate> sweep(GgmlType type, int threads, int64_t tokens, bool q8) {
  const int64_t rows = 5632, cols = 2048;
  const auto bytes = make_weight(type, rows, cols);
  Weight w{.name = "tune", .type = type, .ne = {cols, rows}, .data = bytes.data(), .nbytes = bytes.size()};
  // Tune the kernel the engine will run: repacked weights where it repacks them.
  if (packable(w) && matmul_kernels().repacks(type)) w.packed = pack_weight(w);
  std::vector<float> x(tokens * cols), y(tokens * rows);
  for (size_t i = 0; i < x.size(); i++) x[i] = std::cos(static_cast<float>(i)) * 0.5f;
  ThreadPool pool(threads);
  std::vector<Candidate> out;
  for (int64_t chunk = 16; chunk <= Tuning::kMaxTokenChunk; chunk *= 2) {
    Tuning t = tuning();
    (q8 ? t.q8_token_chunk : t.float_token_chunk) = chunk;
    Matmul mm(matmul_kernels(), t);
    mm.run(pool, w, x.data(), tokens, y.data());  // warm-up
    std::vector<double> secs;
    for (int rep = 0; rep < 5; rep++) {
      const auto t0 = std::chrono::steady_clock::now();
      mm.run(pool, w, x.data(), tokens, y.data());
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(secs.begin(), secs.end());
    out.push_back({chunk, 2.0 * rows * cols * tokens / secs[secs.size() / 2] / 1e9});
  }
  return out;
}

// The streaming kernels against the tile unit's on the same repacked weight at growing batches (median of 5
// each, interleaved), for Tuning::tile_min_tokens.
std::vector<CrossoverPoint> crossover_sweep(GgmlType type, int threads) {
  const int64_t rows = 5632, cols = 2048;
  const auto bytes = make_weight(type, rows, cols);
  Weight w{.name = "tune", .type = type, .ne = {cols, rows}, .data = bytes.data(), .nbytes = bytes.size()};
  w.packed = pack_weight(w);
  ThreadPool pool(threads);
  std::vector<CrossoverPoint> out;
  for (int64_t tokens = 1; tokens <= 128; tokens *= 2) {
    std::vector<float> x(tokens * cols), y(tokens * rows);
    for (size_t i = 0; i < x.size(); i++) x[i] = std::cos(static_cast<float>(i)) * 0.5f;
    Tuning streaming = tuning(), tiles = tuning();
    streaming.tile_min_tokens = tokens + 1;
    tiles.tile_min_tokens = 1;
    Matmul ms(matmul_kernels(), streaming), mt(matmul_kernels(), tiles);
    ms.run(pool, w, x.data(), tokens, y.data());
    mt.run(pool, w, x.data(), tokens, y.data());
    std::vector<double> s_secs, t_secs;
    for (int rep = 0; rep < 5; rep++)
      for (auto [mm, secs] : {std::pair{&ms, &s_secs}, std::pair{&mt, &t_secs}}) {
        const auto t0 = std::chrono::steady_clock::now();
        mm->run(pool, w, x.data(), tokens, y.data());
        secs->push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    std::sort(s_secs.begin(), s_secs.end());
    std::sort(t_secs.begin(), t_secs.end());
    out.push_back({tokens, s_secs[2], t_secs[2]});
  }
  return out;
}

int64_t best_of(const std::vector<Candidate>& cs) {
  return std::max_element(cs.begin(), cs.end(), [](auto& a, auto& b) { return a.gflops < b.gflops; })->chunk;
}

}  // namespace

void register_tune(CLI::App& app) {
  static int threads = 0;
  static int64_t tokens = 128;
  static bool dry_run = false;
  auto* cmd = add_command(app, "tune", "Search tile parameters on this machine and store the winners", [] {
    if (tokens < 2 || tokens > 4096) throw Error(fmt::format("--tokens {} is out of range (2 to 4096)", tokens));
    const int n = threads > 0 ? threads : default_thread_count();
    fmt::print("tuning with {} thread(s), {}-token batches of a 5632x2048 weight (median of 5)\n", n, tokens);
    fmt::print("current: q8 token chunk {}, float token chunk {}, tile crossover {} tokens ({})\n\n",
               tuning().q8_token_chunk, tuning().float_token_chunk, tuning().tile_min_tokens, tuning().source);
    Tuning t = tuning();
    const auto q8 = sweep(GgmlType::Q8_0, n, tokens, true);
    const auto fl = sweep(GgmlType::F16, n, tokens, false);
    fmt::print("{:>12} {:>16} {:>16}\n", "token chunk", "Q8_0 GFLOP/s", "F16 GFLOP/s");
    for (size_t i = 0; i < q8.size(); i++) fmt::print("{:>12} {:>16.1f} {:>16.1f}\n", q8[i].chunk, q8[i].gflops, fl[i].gflops);
    t.q8_token_chunk = best_of(q8);
    t.float_token_chunk = best_of(fl);
    fmt::print("\nbest: q8 token chunk {}, float token chunk {}\n", t.q8_token_chunk, t.float_token_chunk);
    if (const PackedGemm* tiles = packed_tile_gemm(); tiles && matmul_kernels().repacks(GgmlType::Q4_0)) {
      const auto points = crossover_sweep(GgmlType::Q4_0, n);
      fmt::print("\n{:>8} {:>16} {:>16}   Q4_0, ms per batch: streaming ({}) vs tiles ({})\n", "tokens",
                 "streaming", "tiles", packed_gemm()->isa, tiles->isa);
      for (const auto& p : points)
        fmt::print("{:>8} {:>16.3f} {:>16.3f}\n", p.tokens, 1e3 * p.streaming_s, 1e3 * p.tiles_s);
      t.tile_min_tokens = tile_crossover(points);
      fmt::print("tile crossover: batches of {} tokens or more run on the tiles\n", t.tile_min_tokens);
    } else {
      fmt::print("tile crossover: nothing to measure: no tile kernels at this level (amx: {}); the streaming "
                 "kernels take every batch\n",
                 amx_state().detail);
    }
    if (dry_run) {
      fmt::print("(dry run: nothing written)\n");
      return 0;
    }
    store_tuning_file(t);
    fmt::print("stored in {} (later runs load it; delete it to return to the derived defaults)\n", tuning_file_path());
    return 0;
  });
  cmd->add_option("-t,--threads", threads, "Threads (0: all cores)");
  cmd->add_option("--tokens", tokens, "Batch size to tune for")->capture_default_str();
  cmd->add_flag("--dry-run", dry_run, "Measure and print, but do not write the tuning file");
}

}  // namespace kestrel::cli
