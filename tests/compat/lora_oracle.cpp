// lora_oracle: llama.cpp's greedy ids for a token-id prompt with LoRA adapters applied (the reference that
// tests/reference/test_lora_cells.cpp compares kestrel's with; lora_cells.py builds and runs it).
//
// Build (a llama.cpp checkout and its CMake build with shared libraries, as get-llama.sh makes):
//   c++ -std=c++17 -O2 lora_oracle.cpp -I$LLAMA/include -I$LLAMA/ggml/include -I$LLAMA/common
//       -L$LLAMA_BIN -lllama-common -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA_BIN -o lora_oracle
// Run:
//   lora_oracle [--threads 2] [-n 16] [--lora FILE SCALE]... [--cvec FILE SCALE]... [--cvec-range START END]
//               MODEL.gguf "ID ID ..."
//
// The adapters are loaded with llama_adapter_lora_init and set with llama_set_adapters_lora at their scales (as
// --lora-scaled does); the control vectors summed by common_control_vector_load and set with llama_set_adapter_cvec
// on the range (default 1 to n_layer, as common_init_from_params does); the prompt runs as one batch (its last row's logits), then one token per step, greedy.
// CPU only, float32 KV cache, no flash attention. Prints {"ids": [...], "gap": [...], "best": [...]}: per
// generated token its id, the best - second-best logit of the row it came from, and that best logit. On failure {"error": "..."} and exit 1.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "llama.h"
#include "oracle_common.h"

int main(int argc, char** argv) {
  int threads = 2, n_predict = 16;
  std::vector<std::string> pos, lora_paths;
  std::vector<float> lora_scales;
  std::vector<common_control_vector_load_info> cvecs;
  int cvec_start = 0, cvec_end = 0;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "-n" && i + 1 < argc) {
      n_predict = std::atoi(argv[++i]);
    } else if (a == "--lora" && i + 2 < argc) {
      lora_paths.push_back(argv[++i]);
      lora_scales.push_back(std::strtof(argv[++i], nullptr));
    } else if (a == "--cvec" && i + 2 < argc) {
      const std::string file = argv[++i];
      cvecs.push_back({std::strtof(argv[++i], nullptr), file});
    } else if (a == "--cvec-range" && i + 2 < argc) {
      cvec_start = std::atoi(argv[++i]);
      cvec_end = std::atoi(argv[++i]);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2) {
    std::fprintf(stderr, "usage: %s [--threads N] [-n N] [--lora FILE SCALE]... MODEL \"IDS\"\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt;
  std::istringstream in(pos[1]);
  for (long v; in >> v;) prompt.push_back(static_cast<llama_token>(v));
  const int n = static_cast<int>(prompt.size());
  if (n < 1) return fail("the prompt is empty");

  llama_log_set(log_cb, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(pos[0].c_str(), mp);
  if (!model) return fail("llama.cpp could not load " + pos[0]);
  std::vector<llama_adapter_lora*> adapters;
  for (const std::string& p : lora_paths) {
    llama_adapter_lora* a = llama_adapter_lora_init(model, p.c_str());
    if (!a) return fail("llama.cpp could not load the adapter " + p);
    adapters.push_back(a);
  }
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n_ctx = n + n_predict + 16 < 512 ? 512 : n + n_predict + 16;
  llama_context* ctx = llama_init_from_model(model, f32_context_params(n_ctx, n_ctx, threads));
  if (!ctx) return fail("no context");
  if (!adapters.empty() && llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), lora_scales.data()) != 0)
    return fail("llama_set_adapters_lora failed");
  if (!cvecs.empty()) {
    if (cvec_start <= 0) cvec_start = 1;
    if (cvec_end <= 0) cvec_end = llama_model_n_layer(model);
    const common_control_vector_data cv = common_control_vector_load(cvecs);
    if (cv.n_embd == -1) return fail("common_control_vector_load failed");
    if (llama_set_adapter_cvec(ctx, cv.data.data(), cv.data.size(), cv.n_embd, cvec_start, cvec_end) != 0)
      return fail("llama_set_adapter_cvec failed");
  }

  std::string ids, gaps, bests;
  char buf[64];
  llama_batch b = llama_batch_get_one(prompt.data(), n);
  llama_token next = 0;
  for (int step = 0; step < n_predict; step++) {
    if (llama_decode(ctx, b) != 0) return fail("llama_decode failed");
    const float* l = llama_get_logits_ith(ctx, -1);
    int best = 0, sec = 1;
    if (l[sec] > l[best]) std::swap(best, sec);
    for (int t = 2; t < n_vocab; t++) {
      if (l[t] > l[best]) {
        sec = best;
        best = t;
      } else if (l[t] > l[sec]) {
        sec = t;
      }
    }
    const char* sep = step ? ", " : "";
    ids += sep + std::to_string(best);
    std::snprintf(buf, sizeof buf, "%s%.6g", sep, static_cast<double>(l[best] - l[sec]));
    gaps += buf;
    std::snprintf(buf, sizeof buf, "%s%.7g", sep, static_cast<double>(l[best]));
    bests += buf;
    next = best;
    b = llama_batch_get_one(&next, 1);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  std::printf("{\"ids\": [%s], \"gap\": [%s], \"best\": [%s]}\n", ids.c_str(), gaps.c_str(), bests.c_str());
  return 0;
}
