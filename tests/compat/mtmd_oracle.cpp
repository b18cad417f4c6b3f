// mtmd_oracle: llama.cpp's multimodal path (libmtmd: the library llama-mtmd-cli and llama-server use) over a
// text model, its mmproj and images: the reference tests/reference/test_mmproj_cells.cpp compares kestrel with
// (mmproj_cells.py builds and runs it).
//
// Build (a llama.cpp checkout and its CMake build with shared libraries, as get-llama.sh makes):
//   c++ -std=c++17 -O2 mtmd_oracle.cpp -I$LLAMA/include -I$LLAMA/ggml/include -I$LLAMA/tools/mtmd
//       -L$LLAMA_BIN -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA_BIN -o mtmd_oracle
// Run:
//   mtmd_oracle [--threads 2] [-n 16] [--embd FILE] [--time REPS] [--fa on|off] [--image-min-tokens N]
//               [--image-max-tokens N] MODEL MMPROJ "PROMPT" IMAGE...
//
// What it does, as llama-mtmd-cli does it but without a chat template (the prompt as given): mtmd_tokenize with
// add_special and parse_special; every image chunk encoded (mtmd_encode_chunk) and its rows written to --embd
// (float32, the chunks in order); the chunks decoded by mtmd_helper_eval_chunks (n_batch 512, the image chunks
// non-causal where the projector says so), then the argmax fed back n times. CPU only, float32 KV cache, no flash
// attention (text model and encoder; --fa on: llama.cpp's flash attention in both). Prints {"chunks": [{"text":
// [ids]} | {"image": n_tokens, "non_causal": b, "n_pos": the positions it takes}], "ids": [...], "gap": [...],
// "second": [...], "n_embd": N, "logits_first": the first step's logits row, "logits_last": the last step's}; on
// failure {"error": "..."} and exit 1. --time REPS (scripts/bench-mmproj.sh): after one warm-up, REPS times the
// encode of every image chunk and the time to the first token (the chunks evaluated from an empty cache, the
// images encoded again, the first token's logits), as "encode_ms" and "ttft_ms" lists.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"
#include "oracle_common.h"
#include "mtmd-helper.h"
#include "mtmd.h"

int main(int argc, char** argv) {
  int threads = 2, n_predict = 16, time_reps = 0, min_tokens = -1, max_tokens = -1;
  bool fa = false;
  std::string embd_path;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "-n" && i + 1 < argc) n_predict = std::atoi(argv[++i]);
    else if (a == "--embd" && i + 1 < argc) embd_path = argv[++i];
    else if (a == "--time" && i + 1 < argc) time_reps = std::atoi(argv[++i]);
    else if (a == "--fa" && i + 1 < argc) fa = std::string(argv[++i]) == "on";
    else if (a == "--image-min-tokens" && i + 1 < argc) min_tokens = std::atoi(argv[++i]);
    else if (a == "--image-max-tokens" && i + 1 < argc) max_tokens = std::atoi(argv[++i]);
    else pos.push_back(a);
  }
  if (pos.size() < 4) {
    std::fprintf(stderr, "usage: %s [--threads N] [-n N] [--embd FILE] MODEL MMPROJ PROMPT IMAGE...\n", argv[0]);
    return 2;
  }
  llama_log_set(log_cb, nullptr);
  mtmd_helper_log_set(log_cb, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(pos[0].c_str(), mp);
  if (!model) return fail("llama.cpp could not load " + pos[0]);
  const int n_ctx = 2048;
  llama_context_params cp = f32_context_params(n_ctx, 512, threads);
  if (fa) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return fail("no context");

  mtmd_context_params mcp = mtmd_context_params_default();
  mcp.use_gpu = false;
  mcp.print_timings = false;
  mcp.n_threads = threads;
  mcp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  mcp.warmup = false;
  mcp.image_min_tokens = min_tokens;
  mcp.image_max_tokens = max_tokens;
  mtmd_context* mctx = mtmd_init_from_file(pos[1].c_str(), model, mcp);
  if (!mctx) return fail("libmtmd could not load " + pos[1]);

  std::vector<mtmd_bitmap*> bitmaps;
  for (size_t i = 3; i < pos.size(); i++) {
    mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_file(mctx, pos[i].c_str(), false, mtmd_helper_init_opt_default());
    if (!w.bitmap) return fail("could not read " + pos[i]);
    bitmaps.push_back(w.bitmap);
  }
  mtmd_input_text text{pos[2].c_str(), pos[2].size(), /*add_special=*/true, /*parse_special=*/true};
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  if (mtmd_tokenize(mctx, chunks, &text, const_cast<const mtmd_bitmap**>(bitmaps.data()), bitmaps.size()) != 0)
    return fail("mtmd_tokenize failed");

  const int n_embd = llama_model_n_embd_inp(model);
  std::FILE* embd = embd_path.empty() ? nullptr : std::fopen(embd_path.c_str(), "wb");
  std::string chunk_json;
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
    const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
    if (!chunk_json.empty()) chunk_json += ", ";
    if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      size_t n = 0;
      const llama_token* t = mtmd_input_chunk_get_tokens_text(c, &n);
      chunk_json += "{\"text\": [";
      for (size_t j = 0; j < n; j++) chunk_json += (j ? ", " : "") + std::to_string(t[j]);
      chunk_json += "]}";
      continue;
    }
    const size_t n = mtmd_input_chunk_get_n_tokens(c);
    chunk_json += "{\"image\": " + std::to_string(n) + ", \"non_causal\": " +
                  (mtmd_decode_use_non_causal(mctx, c) ? "true" : "false") +
                  ", \"n_pos\": " + std::to_string(mtmd_input_chunk_get_n_pos(c)) + "}";
    if (embd) {
      if (mtmd_encode_chunk(mctx, c) != 0) return fail("mtmd_encode_chunk failed");
      std::fwrite(mtmd_get_output_embd(mctx), sizeof(float), n * static_cast<size_t>(n_embd), embd);
    }
  }
  if (embd) std::fclose(embd);

  std::string timing;
  if (time_reps > 0) {
    using clock = std::chrono::steady_clock;
    std::string enc, ttft;
    for (int r = 0; r <= time_reps; r++) {
      auto t0 = clock::now();
      for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_TEXT && mtmd_encode_chunk(mctx, c) != 0)
          return fail("mtmd_encode_chunk failed");
      }
      const double e_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      llama_memory_clear(llama_get_memory(ctx), true);
      t0 = clock::now();
      llama_pos past = 0;
      if (mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 512, true, &past) != 0) return fail("eval failed");
      (void)llama_get_logits_ith(ctx, -1);
      const double t_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      if (r == 0) continue;
      enc += (enc.empty() ? "" : ", ") + std::to_string(e_ms);
      ttft += (ttft.empty() ? "" : ", ") + std::to_string(t_ms);
    }
    llama_memory_clear(llama_get_memory(ctx), true);
    timing = ", \"encode_ms\": [" + enc + "], \"ttft_ms\": [" + ttft + "]";
  }

  llama_pos n_past = 0;
  if (mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 512, /*logits_last=*/true, &n_past) != 0)
    return fail("mtmd_helper_eval_chunks failed");
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::string ids, gaps, seconds, first_logits, last_logits;
  auto row = [&](const float* logits) {
    std::string out;
    char v[32];
    for (int i = 0; i < n_vocab; i++) {
      std::snprintf(v, sizeof v, "%s%.6g", i ? ", " : "", logits[i]);
      out += v;
    }
    return out;
  };
  llama_batch b = llama_batch_init(1, 0, 1);
  for (int step = 0; step < n_predict; step++) {
    const float* logits = llama_get_logits_ith(ctx, -1);
    if (step == 0) first_logits = row(logits);
    if (step + 1 == n_predict) last_logits = row(logits);
    int best = 0, second = -1;
    for (int v = 1; v < n_vocab; v++)
      if (logits[v] > logits[best]) best = v;
    for (int v = 0; v < n_vocab; v++)
      if (v != best && (second < 0 || logits[v] > logits[second])) second = v;
    char gap[32];
    std::snprintf(gap, sizeof gap, "%.5f", logits[best] - logits[second]);
    ids += (step ? ", " : "") + std::to_string(best);
    gaps += (step ? ", " : "") + std::string(gap);
    seconds += (step ? ", " : "") + std::to_string(second);
    b.token[0] = best;
    b.pos[0] = n_past++;
    b.n_seq_id[0] = 1;
    b.seq_id[0][0] = 0;
    b.logits[0] = 1;
    b.n_tokens = 1;
    if (step + 1 < n_predict && llama_decode(ctx, b) != 0) return fail("llama_decode failed");
  }
  std::printf("{\"chunks\": [%s], \"ids\": [%s], \"gap\": [%s], \"second\": [%s], \"n_embd\": %d, "
              "\"logits_first\": [%s], \"logits_last\": [%s]%s}\n",
              chunk_json.c_str(), ids.c_str(), gaps.c_str(), seconds.c_str(), n_embd, first_logits.c_str(),
              last_logits.c_str(), timing.c_str());
  return 0;
}
