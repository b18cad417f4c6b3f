// kestrel imatrix -m MODEL -f TEXT -o imatrix.gguf [-c 512] [--chunks N]:
// an importance matrix in llama.cpp's GGUF imatrix format, for quantize --imatrix.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "quant/imatrix.h"
#include "quant/calibration.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {

void register_imatrix(CLI::App& app) {
  static std::string model_path, text_path, out_path = "imatrix.gguf";
  static int64_t ctx = 512, chunks = 0;
  static int threads = 0;
  static bool with_output = false;
  auto* cmd = add_command(app, "imatrix",
                          "Importance matrix (mean square of every matrix input channel over a text) for quantize --imatrix",
                          [] {
                            std::ifstream in(text_path, std::ios::binary);
                            if (!in) throw Error(fmt::format("{}: cannot read the text", text_path));
                            const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                            if (ctx < 16) throw Error(fmt::format("-c {}: chunks need at least 16 tokens", ctx));
                            CalibrationOptions co;
                            co.n_ctx = ctx;
                            co.max_chunks = chunks;
                            co.max_samples = 0;
                            co.n_threads = threads > 0 ? threads : default_thread_count();
                            std::unique_ptr<ProgressBar> bar;
                            co.progress = [&](int64_t c, int64_t total, double ppl) {
                              if (!bar) bar = std::make_unique<ProgressBar>("imatrix", total);
                              bar->update(c + 1, fmt::format("PPL {:.4f}", ppl));
                            };
                            const CalibrationStats stats = collect_activation_stats(model_path, text, co);
                            const auto n_chunks = static_cast<uint32_t>(stats.n_tokens / ctx);
                            const ImportanceMatrix m = importance_from_calibration(
                                stats, std::filesystem::path(text_path).filename().string(),
                                chunks > 0 ? std::min<uint32_t>(n_chunks, static_cast<uint32_t>(chunks)) : n_chunks,
                                static_cast<uint32_t>(ctx), with_output);
                            write_imatrix(m, out_path);
                            fmt::print("wrote {}: {} matrices, {} chunks of {} tokens of {}\n", out_path,
                                       m.entries.size(), m.chunk_count, ctx, text_path);
                            return 0;
                          });
  cmd->add_option("-m,--model", model_path, "GGUF model")->required();
  cmd->add_option("-f,--file", text_path, "Calibration text (plain text)")->required();
  cmd->add_option("-o,--output", out_path, "Output file (GGUF imatrix)")->capture_default_str();
  cmd->add_option("-c,--ctx", ctx, "Tokens per chunk")->capture_default_str();
  cmd->add_option("--chunks", chunks, "Chunks to use (0: the whole text)")->capture_default_str();
  cmd->add_flag("--process-output", with_output, "Also collect the output head's input (llama-imatrix's flag)");
  cmd->add_option("-t,--threads", threads, "Threads (0: all cores)");
}

}  // namespace kestrel::cli
