// What the llama.cpp oracles of this folder share (mtp_oracle.cpp, mtmd_oracle.cpp, lora_oracle.cpp; each built
// alone against a llama.cpp checkout): llama.cpp's errors collected from its log, the JSON error line an oracle
// prints on failure, and the context they run in (CPU, float32 KV cache, no flash attention, one sequence).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

#include "llama.h"

static std::string g_errors;

static void log_cb(enum ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) g_errors += text;
  if (level == GGML_LOG_LEVEL_ERROR || std::getenv("REF_VERBOSE")) std::fputs(text, stderr);
}

// Prints {"error": "WHAT: llama.cpp's errors"} and returns the exit status 1.
static int fail(const std::string& what) {
  std::string msg = what + (g_errors.empty() ? "" : ": " + g_errors), esc;
  for (char c : msg) {
    if (c == '"' || c == '\\') esc += '\\';
    esc += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  std::printf("{\"error\": \"%s\"}\n", esc.c_str());
  return 1;
}

// A context of n_ctx positions taken in batches of `batch`, on `threads` threads.
static llama_context_params f32_context_params(int n_ctx, int batch, int threads) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = batch;
  cp.n_ubatch = batch;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  return cp;
}
