#pragma once
// A model loaded to run on this machine: the mapped file, the backend, the
// model, its tokenizer and a paged KV cache — the parts, built once by `run`,
// `serve`, the measurements and tests. (What runs requests over it is the
// step executor; the server's engine thread is serving/engine/serving_engine.h.)
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/lora.h"
#include "model/lora_backend.h"
#include "model/model.h"
#include "kv/kv_cache.h"
#include "core/communicator.h"
#include "core/profiler.h"
#include "tokenizer/tokenizer.h"
#include "grammar/token_constraint.h"

namespace kestrel {

struct LoadOptions {
  std::string model_path;
  std::string llama2c_tokenizer;  // set: model_path is a llama2.c checkpoint, imported in memory
  int n_threads = 0;              // 0: all cores
  std::string device = "cpu";     // --device: cpu, vulkan or vulkan:N (backend/vulkan/vulkan_backend.h)
  int gpu_layers = -1;            // --gpu-layers: layers [0, N) on the device, the rest on the CPU (-1: all)
  bool cpu_moe = false;           // --cpu-moe: routed experts on the CPU
  int64_t gpu_memory = 0;         // --gpu-memory: bytes the weights may take on the device (0: what it has)
  int64_t n_ctx = 0;              // 0: the model's training context
  int64_t max_batch_tokens = 512;
  int kv_block_size = 16;
  int n_seq_max = 1;              // sequences the KV pool must hold at full context
  int64_t kv_cache_bytes = 0;     // set: size the KV pool to this many bytes instead (the server)
  int64_t kv_cache_max_bytes = 0; // set: at most this many bytes (the server's default sizing)
  bool profile = false;           // time every operator (LoadedModel::profiler)
  bool use_mmap = false;          // map the file instead of loading it into huge pages
  bool log_fusion = false;        // print the fused operators at load
  bool repack_weights = true;     // repack Q8_0/Q4_0 for the int8 kernels (false: llama.cpp-identical logits)
  MlaAttention mla = MlaAttention::Auto;  // DeepSeek models: how MLA attention runs
  bool load_mtp = false;                  // DeepSeek: load the multi-token-prediction block (--spec mtp)
  std::string mtp_model;                  // set: that block from this file (DeepSeek-V4's mtp-*.gguf); implies load_mtp
  // Set: the model calls the backend this returns, built around the CPU
  // backend (calibration records activations this way).
  std::function<std::unique_ptr<Backend>(Backend& inner)> wrap_backend;
  // LoRA adapters (model/lora.h: --lora, --lora-scaled, --lora-modules), loaded after the model and checked
  // against it; the model then runs through a LoraBackend.
  struct Lora {
    std::string path;
    float scale = 1.0f;  // the default set's (--lora-init-without-apply: 0)
    std::string name;    // set: also served as a model of this name (--lora-modules NAME=FILE)
  };
  std::vector<Lora> loras;
  // Control vectors (model/control_vector.h: --control-vector, --control-vector-scaled) on layers
  // [cvec_layer_start, cvec_layer_end] (0: 1 and the model's last).
  std::vector<ControlVectorFile> control_vectors;
  int cvec_layer_start = 0, cvec_layer_end = 0;
  KvType kv_type_k = KvType::F32;         // how the KV cache stores keys
  KvType kv_type_v = KvType::F32;         // ...and values
  // Set with more than one rank: tensor parallelism over them (--parallel
  // tp=N under mpirun). Rank 0 runs everything; the others follow its steps.
  std::shared_ptr<Communicator> comm;
  int expert_groups = 1;    // with comm: ep of --parallel tp=T,ep=E (T = ranks / E)
  int pipeline_stages = 1;  // ...and pp of --parallel tp=T,ep=E,pp=P
  bool parallel_overlap = true;  // sum one half of a step's rows while the other computes
  // Under pp, rank 0 starts the next step (other requests) while this one is in the later stages.
  bool parallel_step_pipelining = true;
  ExpertSum expert_sum = ExpertSum::Auto;  // how MoE outputs are summed under ep
  // Set: told as each stage of the load begins ("reading the model file", "loading weights", "reading the
  // tokenizer", "allocating the KV cache"), for the server's /ready.
  std::function<void(const std::string& stage)> on_stage;
};

// Whether the backend's repacked copies hold most of the file's weight bytes
// (matrices and MoE expert stacks of packable types): LoadedModel::load then maps
// the file (its copy is read once, by the packer; page cache the kernel may
// reclaim) instead of loading it into huge pages that would sit unused.
bool mostly_repacked(const GgufFile& f);

struct LoadedModel {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<GgufFile> mtp_file;      // LoadOptions::mtp_model's
  std::unique_ptr<Profiler> profiler;      // set when LoadOptions::profile
  std::unique_ptr<Backend> base_backend;   // the kernels
  std::unique_ptr<Backend> backend;        // what the model calls: base_backend, or a profiler around it
  // With LoadOptions::loras: the LoRA layer, outermost in `backend` (model/lora_backend.h), and the adapters in
  // the order given (ids 0, 1, ...), each with its default scale and name.
  LoraBackend* lora = nullptr;
  struct Adapter {
    std::shared_ptr<const LoraAdapter> adapter;
    float scale = 1.0f;
    std::string name;
  };
  std::vector<Adapter> adapters;
  // The set of the adapters at their scales (null: none, or all at 0).
  std::shared_ptr<const LoraSet> default_lora() const;
  // Before the model, so destroyed after it: a tensor-parallel leader's model finishes its steps and
  // detaches from the cache as it goes.
  std::unique_ptr<PagedKvCache> kv;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t n_ctx = 0;
  std::shared_ptr<Communicator> comm;      // set under tensor parallelism: every rank
  std::shared_ptr<Communicator> tp_group;  // ...and this rank's tensor-parallel group (null: tp=1)
  std::shared_ptr<Communicator> stage_group;  // ...and its pipeline stage's ranks (with both ep and pp)

  static LoadedModel load(const LoadOptions& options);
  // A rank other than 0 of a tensor-parallel job: it runs no command of its
  // own, only follow_leader().
  bool is_follower() const { return comm && comm->rank() != 0; }
  // Runs the leader's steps until it stops (returns the steps run); throws
  // CommunicatorFailure when a collective times out.
  int64_t follow_leader();
  // The vocabulary as grammars see it (a trie of every token's bytes): built
  // on first use, then shared by every constrained request, in run and serve.
  const std::shared_ptr<const GrammarVocab>& grammar_vocab() {
    if (!grammar_vocab_) grammar_vocab_ = std::make_shared<const GrammarVocab>(*tokenizer);
    return grammar_vocab_;
  }

 private:
  std::shared_ptr<const GrammarVocab> grammar_vocab_;
};

// Opens a GGUF, or imports a llama2.c checkpoint when a tokenizer.bin is given.
std::unique_ptr<GgufFile> open_model_file(const std::string& path, const std::string& llama2c_tokenizer,
                                          MappedFile::Mode mode = MappedFile::Mode::Map);

// Threads when none are asked for: KESTREL_THREADS if set, else the CPUs this process may run on.
int default_thread_count();

// The paged KV cache for a model's layout at n_ctx: n_seq_max sequences at
// full context, or as many blocks as o.kv_cache_bytes / kv_cache_max_bytes
// allow. Sliding-window layers get a pool of their own sized for a window
// (and a batch) per sequence.
// n_blocks_exactly > 0 overrides the sizing (the ranks of a tensor-parallel
// job agree on one pool).
// memory: the backend whose memory the rows may live in (Backend::kv_memory; null: host memory).
std::unique_ptr<PagedKvCache> make_kv_cache(const KvLayout& layout, int64_t n_ctx, const LoadOptions& o,
                                            int64_t n_blocks_exactly = 0, Backend* memory = nullptr);

}  // namespace kestrel
