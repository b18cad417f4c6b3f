// mtp_oracle: llama.cpp's multi-token-prediction head over a token-id prompt (the reference that
// tests/reference/test_synth_cells.cpp compares kestrel's MTP rows with; synth_cells.py builds and runs it).
//
// Build (a llama.cpp checkout and its CMake build with shared libraries, as get-llama.sh makes):
//   c++ -std=c++17 -O2 mtp_oracle.cpp -I$LLAMA/include -I$LLAMA/ggml/include -I$LLAMA/src
//       -L$LLAMA_BIN -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA_BIN -o mtp_oracle
// Run:
//   mtp_oracle [--threads 2] [--mtp-model MTP.gguf] MODEL.gguf "ID ID ..."
//
// The model is loaded with its MTP block (or, with --mtp-model, the MTP block from that file of its own, as
// llama.cpp's converter publishes DeepSeek-V4's and llama.cpp runs it: a second model for the MTP context). The target context runs the prompt in one batch and hands over
// every position's h_nextn (llama.cpp's staging API, src/llama-ext.h); an MTP context (LLAMA_CONTEXT_TYPE_MTP)
// then runs one batch of n-1 rows, row p carrying token p+1, the target's h_nextn at p, and position p — the
// rows kestrel's MtpProposer runs as it catches up (llama.cpp's own driver places them one position later; only
// relative positions reach a window-only MTP block). CPU only, float32 KV cache, no flash attention.
// Prints {"ids": [...], "gap": [...], "second": [...]}: per row the argmax of its logits (the predicted token
// p+2), best - second-best logit, and the runner-up. On failure {"error": "..."} and exit 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "llama-ext.h"
#include "llama.h"
#include "oracle_common.h"

// Row i of batch b: token at position pos, sequence 0, its logits wanted.
static void set_row(llama_batch& b, int i, llama_token token, int pos) {
  b.token[i] = token;
  b.pos[i] = pos;
  b.n_seq_id[i] = 1;
  b.seq_id[i][0] = 0;
  b.logits[i] = 1;
}

int main(int argc, char** argv) {
  int threads = 2;
  std::string mtp_path;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--mtp-model" && i + 1 < argc)
      mtp_path = argv[++i];
    else
      pos.push_back(a);
  }
  if (pos.size() != 2) {
    std::fprintf(stderr, "usage: %s [--threads N] [--mtp-model FILE] MODEL \"IDS\"\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt;
  std::istringstream in(pos[1]);
  for (long v; in >> v;) prompt.push_back(static_cast<llama_token>(v));
  const int n = static_cast<int>(prompt.size());
  if (n < 2) return fail("the prompt needs at least 2 ids");
  const int n_ctx = n < 512 ? 512 : n + 16;

  llama_log_set(log_cb, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mtp = true;
  llama_model* model = llama_model_load_from_file(pos[0].c_str(), mp);
  if (!model) return fail("llama.cpp could not load " + pos[0]);
  llama_model* mtp_model = mtp_path.empty() ? model : llama_model_load_from_file(mtp_path.c_str(), mp);
  if (!mtp_model) return fail("llama.cpp could not load " + mtp_path);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int width = llama_model_n_embd_out(model);

  // The target: every position's h_nextn.
  llama_context* tgt = llama_init_from_model(model, f32_context_params(n_ctx, n_ctx, threads));
  if (!tgt) return fail("no target context");
  llama_set_embeddings_nextn(tgt, true, /*masked=*/false);
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; i++) set_row(b, i, prompt[i], i);
  b.n_tokens = n;
  if (llama_decode(tgt, b) != 0) return fail("llama_decode (target) failed");
  llama_batch_free(b);
  std::vector<float> h(static_cast<size_t>(n) * width);
  for (int i = 0; i < n; i++) {
    const float* row = llama_get_embeddings_nextn_ith(tgt, i);
    if (!row) return fail("no h_nextn for row " + std::to_string(i));
    std::memcpy(h.data() + static_cast<size_t>(i) * width, row, sizeof(float) * width);
  }

  // The MTP rows.
  llama_context_params mcp = f32_context_params(n_ctx, n_ctx, threads);
  mcp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  mcp.ctx_other = tgt;
  llama_context* mtp = llama_init_from_model(mtp_model, mcp);
  if (!mtp) return fail("no MTP context (does the file have an MTP block?)");
  llama_set_embeddings_nextn(mtp, true, /*masked=*/true);
  const int rows = n - 1;
  llama_batch m = llama_batch_init(rows, width, 1);  // allocates embd; MTP rows need tokens too
  std::vector<llama_token> tokens(static_cast<size_t>(rows));
  m.token = tokens.data();
  for (int p = 0; p < rows; p++) {
    set_row(m, p, prompt[p + 1], p);
    std::memcpy(m.embd + static_cast<size_t>(p) * width, h.data() + static_cast<size_t>(p) * width,
                sizeof(float) * width);
  }
  m.n_tokens = rows;
  if (llama_decode(mtp, m) != 0) return fail("llama_decode (MTP) failed");

  std::string ids, gaps, seconds;
  char buf[64];
  for (int p = 0; p < rows; p++) {
    const float* l = llama_get_logits_ith(mtp, p);
    if (!l) return fail("no MTP logits for row " + std::to_string(p));
    int best = 0, sec = -1;
    for (int t = 1; t < n_vocab; t++) {
      if (l[t] > l[best]) {
        sec = best;
        best = t;
      } else if (sec < 0 || l[t] > l[sec]) {
        sec = t;
      }
    }
    const char* sep = p ? ", " : "";
    ids += sep + std::to_string(best);
    seconds += sep + std::to_string(sec);
    std::snprintf(buf, sizeof buf, "%s%.6g", sep, static_cast<double>(l[best] - l[sec]));
    gaps += buf;
  }
  m.token = nullptr;  // ours, not llama_batch_init's
  llama_batch_free(m);
  llama_free(mtp);
  llama_free(tgt);
  if (mtp_model != model) llama_model_free(mtp_model);
  llama_model_free(model);
  llama_backend_free();
  std::printf("{\"ids\": [%s], \"gap\": [%s], \"second\": [%s]}\n", ids.c_str(), gaps.c_str(), seconds.c_str());
  return 0;
}
