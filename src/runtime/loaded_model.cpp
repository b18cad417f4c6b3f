#include "runtime/loaded_model.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <thread>

#include "core/error.h"
#include "gguf/llama2c_import.h"
#include "kernels/matmul_kernels.h"
#include "backend/profiling_backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "parallel/step/follower.h"
#include "parallel/step/leader_model.h"
#include "runtime/generator.h"

namespace kestrel {

int default_thread_count() {
  // KESTREL_THREADS sets the default (-t still wins): e.g. 1 where several processes share the cores, as the
  // test suite's parallel jobs do (a fork-join pool with more threads than free cores waits at every barrier).
  if (const char* env = std::getenv("KESTREL_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > 1024)
      throw Error(fmt::format("KESTREL_THREADS='{}' is not a thread count (1 to 1024)", env));
    return static_cast<int>(n);
  }
  // The CPUs this process may run on (taskset, a container's cpuset), not every CPU the machine has.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

std::unique_ptr<GgufFile> open_model_file(const std::string& path, const std::string& llama2c_tokenizer,
                                          MappedFile::Mode mode) {
  if (path.empty()) throw Error("no model given (use -m MODEL.gguf)");
  if (access(path.c_str(), R_OK) != 0) throw Error(fmt::format("{}: model file does not exist or is not readable", path));
  if (llama2c_tokenizer.empty()) {
    if (!is_gguf_file(path))
      throw Error(fmt::format("{}: not a GGUF file (for a llama2.c checkpoint also pass --tokenizer TOKENIZER.bin)", path));
    return std::make_unique<GgufFile>(GgufFile::open(path, mode));
  }
  const MappedFile ckpt = MappedFile::open(path);
  const MappedFile tok = MappedFile::open(llama2c_tokenizer);
  Llama2cOptions opt;
  GgufWriter w = llama2c_to_gguf(ckpt, tok, opt);
  return std::make_unique<GgufFile>(GgufFile::parse(MappedFile::from_buffer(w.write_buffer(), path)));
}

// (The repacked copy serves decode as well as batches.)
bool mostly_repacked(const GgufFile& f) {
  size_t packed = 0, total = 0;
  for (const auto& t : f.tensors()) {
    total += t.nbytes;
    // Matrices, and the experts' stacks (MoE: each expert's matrix is repacked on its own).
    const bool matrices = t.ne.size() == 2 || (t.ne.size() == 3 && t.name.find("_exps.") != std::string::npos);
    if (matmul_kernels().repacks(t.type) && matrices && t.name != "token_embd.weight") packed += t.nbytes;
  }
  return 2 * packed > total;
}

// One token through the model with every adapter at scale 1: each pair must have been applied (a matrix the
// family multiplies by inside an operator of its own, or only on some steps, would leave its adapter unapplied:
// an error naming it, never an adapter silently ignored).
static void check_adapters_apply(LoadedModel& e) {
  std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> all;
  for (const auto& a : e.adapters) all.emplace_back(a.adapter, 1.0f);
  GenerationParams p;
  p.max_tokens = 1;
  p.ignore_eos = true;
  p.lora = make_lora_set(std::move(all));
  e.lora->begin_check();
  try {
    const int32_t bos = e.tokenizer->vocab().bos;
    generate(e, {bos >= 0 ? bos : 0}, p);
  } catch (...) {
    e.lora->end_check();
    throw;
  }
  const auto applied = e.lora->end_check();
  // A routed experts' stack counts as applied when one of its experts' pairs was (one token runs a few experts).
  std::set<std::string> stacks;
  for (const LoraPair* p : applied)
    if (!p->stack.empty()) stacks.insert(p->stack);
  for (const auto& a : e.adapters)
    for (const auto& [name, pair] : a.adapter->pairs())
      if (pair.stack.empty() ? !applied.count(&pair) : !stacks.count(pair.stack))
        throw Error(fmt::format("LoRA adapter {}: '{}': Kestrel's {} code multiplies by this matrix inside an operator "
                                "that takes no adapter (or only on some steps), so the adapter would be ignored there; "
                                "not supported yet",
                                a.adapter->path(), name, e.model->config().arch));
}

LoadedModel LoadedModel::load(const LoadOptions& o) {
  if (o.n_threads < 0 || o.n_threads > 1024) throw Error(fmt::format("thread count {} is out of range (1 to 1024)", o.n_threads));
  if (o.n_ctx < 0) throw Error(fmt::format("context size {} must not be negative", o.n_ctx));
  if (o.max_batch_tokens <= 0) throw Error(fmt::format("batch size {} must be positive", o.max_batch_tokens));
  if (o.kv_block_size <= 0 || o.kv_block_size > 4096) throw Error(fmt::format("KV block size {} is out of range (1 to 4096)", o.kv_block_size));
  const auto stage = [&](const char* what) {
    if (o.on_stage) o.on_stage(what);
  };
  LoadedModel e;
  stage("reading the model file");
  e.file = open_model_file(o.model_path, o.llama2c_tokenizer, MappedFile::Mode::Map);
  if (!o.use_mmap && o.llama2c_tokenizer.empty() && !(o.repack_weights && mostly_repacked(*e.file)))
    e.file = open_model_file(o.model_path, o.llama2c_tokenizer, MappedFile::Mode::LoadHugePages);
  CpuBackendOptions bo;
  bo.repack_weights = o.repack_weights;
  e.base_backend = make_cpu_backend(o.n_threads > 0 ? o.n_threads : default_thread_count(), bo);
  if (const int device = parse_device(o.device); device >= 0) {
    if (o.comm && o.comm->size() > 1) throw Error("--device vulkan does not run under --parallel yet (docs/gpu.md)");
    VulkanOptions vo;
    vo.device = device;
    vo.gpu_layers = o.gpu_layers;
    vo.cpu_moe = o.cpu_moe;
    vo.memory_limit = o.gpu_memory;
    const auto arch = e.file->get_string("general.architecture");
    vo.n_layer = arch ? static_cast<int>(e.file->get_int(*arch + ".block_count").value_or(0)) : 0;
    e.base_backend = make_vulkan_backend(vo, std::move(e.base_backend));
  } else if (o.gpu_layers >= 0 || o.cpu_moe || o.gpu_memory > 0) {
    throw Error("--gpu-layers, --cpu-moe and --gpu-memory place work on a GPU: they need --device vulkan");
  }
  if (o.profile) {
    e.profiler = std::make_unique<Profiler>();
    e.backend = make_profiling_backend(*e.base_backend, *e.profiler);
  } else if (o.wrap_backend) {
    e.backend = o.wrap_backend(*e.base_backend);
  } else {
    e.backend = std::move(e.base_backend);
    e.base_backend = nullptr;
  }
  if (!o.loras.empty()) {
    if (o.comm && o.comm->size() > 1) throw Error("LoRA adapters do not run under --parallel yet");
    // (Under a recorder of activations, the updates' own operators bypass it.)
    Backend* ops = o.wrap_backend && !o.profile && e.base_backend ? e.base_backend.get() : nullptr;
    auto lb = std::make_unique<LoraBackend>(std::move(e.backend), ops);
    lb->targets().base = e.file.get();  // (before the load: the matrices it prepares are resolved against the file)
    e.lora = lb.get();
    e.backend = std::move(lb);
  }
  ModelOptions mo;
  mo.max_batch_tokens = o.max_batch_tokens;
  mo.n_ctx = o.n_ctx;
  mo.log_fusion = o.log_fusion;
  mo.mla = o.mla;
  mo.load_mtp = o.load_mtp || !o.mtp_model.empty();
  if (!o.mtp_model.empty()) {
    e.mtp_file = open_model_file(o.mtp_model, "", o.use_mmap ? MappedFile::Mode::Map : MappedFile::Mode::LoadHugePages);
    mo.mtp_file = e.mtp_file.get();
  }
  if (o.comm && o.comm->size() > 1) {
    // rank = (stage * ep + expert group) * tp + (rank within its
    // tensor-parallel group).
    e.comm = o.comm;
    const int ep = o.expert_groups, pp = o.pipeline_stages, r = o.comm->rank();
    if (ep < 1 || pp < 1 || o.comm->size() % (ep * pp) != 0)
      throw Error(fmt::format("{} expert groups x {} stages do not divide {} ranks", ep, pp, o.comm->size()));
    const int tp = o.comm->size() / (ep * pp), per_stage = ep * tp, stage = r / per_stage;
    if (tp > 1) e.tp_group = tp == o.comm->size() ? o.comm : o.comm->split(r / tp, r % tp);
    // Both ep and pp: an MoE layer sums over its stage's ranks only.
    if (ep > 1 && pp > 1) e.stage_group = o.comm->split(stage, r % per_stage);
    mo.shard = {r % tp, tp, e.tp_group.get(), (r % per_stage) / tp, ep, o.comm.get(), stage, pp};
    mo.shard.stage_comm = e.stage_group.get();
    mo.shard.overlap = o.parallel_overlap;
    mo.shard.expert_sum = o.expert_sum;
    if (e.profiler) {  // transfers on their own track, in this rank's trace
      e.profiler->set_rank(r);
      e.comm->set_profiler(e.profiler.get());
      if (e.tp_group) e.tp_group->set_profiler(e.profiler.get());
      if (e.stage_group) e.stage_group->set_profiler(e.profiler.get());
    }
  }
  // Under tensor parallelism the ranks agree that every one of them loaded
  // its share before any goes on (else all stop, none waits for a dead one).
  stage("loading weights");
  try {
    e.model = load_model(*e.file, *e.backend, mo);
  } catch (const Error&) {
    if (e.comm) e.comm->all_reduce_min(0);
    throw;
  }
  if (e.comm && e.comm->all_reduce_min(1) == 0)
    throw Error(fmt::format("rank {}: another rank could not load its share of the model (its error says why)",
                            e.comm->rank()));
  stage("reading the tokenizer");
  e.tokenizer = Tokenizer::from_gguf(*e.file);
  const ModelConfig& c = e.model->config();
  if (e.tokenizer->vocab().size() != c.n_vocab)
    throw Error(fmt::format("{}: tokenizer has {} tokens but the model's embedding has {} rows", o.model_path,
                            e.tokenizer->vocab().size(), c.n_vocab));
  e.n_ctx = o.n_ctx > 0 ? o.n_ctx : c.n_ctx_train;
  if (!o.control_vectors.empty()) {
    stage("loading control vectors");
    e.model->set_control_vector(std::make_shared<const ControlVector>(
        load_control_vectors(o.control_vectors, c.n_embd, c.n_layer, o.cvec_layer_start, o.cvec_layer_end)));
  } else if (o.cvec_layer_start || o.cvec_layer_end) {
    throw Error("--control-vector-layer-range needs --control-vector");
  }
  if (e.lora) {
    stage("loading LoRA adapters");
    LoraTargets& t = e.lora->targets();
    t.arch = c.arch;
    t.n_embd = c.n_embd;
    t.n_vocab = c.n_vocab;
    for (const LoadOptions::Lora& l : o.loras) {
      auto adapter = LoraAdapter::load(l.path, t, e.lora->inner());
      if (!l.name.empty()) adapter->set_label(l.name);
      e.adapters.push_back({std::move(adapter), l.scale, l.name});
    }
  }
  KvLayout l = e.model->kv_layout();
  l.k_type = o.kv_type_k;
  l.v_type = l.v_f32_only ? KvType::F32 : o.kv_type_v;
  // A window that covers the whole context keeps nothing apart (the
  // attention mask still applies it).
  if (l.sliding_window >= e.n_ctx && !l.groups_differ()) l.sliding.clear();
  stage("allocating the KV cache");
  e.kv = make_kv_cache(l, e.n_ctx, o, 0, e.backend.get());
  if (e.comm) {
    // Every rank must hold the same blocks: the fewest any rank's memory allows.
    const int64_t agreed = e.comm->all_reduce_min(e.kv->n_blocks());
    if (agreed != e.kv->n_blocks()) e.kv = make_kv_cache(l, e.n_ctx, o, agreed);
    if (e.comm->rank() == 0) e.model = make_leader_model(std::move(e.model), e.comm, *e.kv, o.parallel_step_pipelining);
  }
  if (!e.adapters.empty()) check_adapters_apply(e);
  return e;
}

std::shared_ptr<const LoraSet> LoadedModel::default_lora() const {
  std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> list;
  for (const Adapter& a : adapters) list.emplace_back(a.adapter, a.scale);
  return make_lora_set(std::move(list));
}

int64_t LoadedModel::follow_leader() {
  if (!is_follower()) throw Error("follow_leader: this process is not a tensor-parallel follower rank");
  try {
    return kestrel::follow_leader(*model, kv->store(), *comm);
  } catch (const CommunicatorFailure&) {
    throw;
  } catch (const Error& err) {
    // Rank 0 is inside the step this rank could not finish: end the job.
    throw CommunicatorFailure(fmt::format("rank {}: {}", comm->rank(), err.what()));
  }
}

std::unique_ptr<PagedKvCache> make_kv_cache(const KvLayout& l, int64_t n_ctx, const LoadOptions& o,
                                            int64_t n_blocks_exactly, Backend* memory) {
  const int64_t bs = o.kv_block_size;
  const int64_t blocks_per_seq = (n_ctx + bs - 1) / bs;
  // Sliding-window layers hold at most a window and a batch per sequence.
  const int64_t sliding_per_seq =
      l.n_sliding() > 0 ? std::min(blocks_per_seq, (l.sliding_window - 1 + o.max_batch_tokens + bs - 1) / bs + 1) : 0;
  const int64_t sliding_cap = sliding_per_seq * o.n_seq_max;
  // Recurrent layers: a state slot per sequence, whatever the context, taken from the budget first.
  const int64_t state_slots = std::max(1, o.n_seq_max);
  const int64_t state_bytes = l.state_bytes_per_seq() * state_slots;
  const int64_t full_block_bytes = bs * l.full_bytes_per_token();
  const int64_t sliding_block_bytes = bs * l.sliding_bytes_per_token();
  // Bytes of a cache with n full-layer blocks.
  auto bytes_for = [&](int64_t n) { return n * full_block_bytes + std::min(n, sliding_cap) * sliding_block_bytes; };
  // The most full-layer blocks that fit in `budget` bytes.
  auto blocks_within = [&](int64_t budget) -> int64_t {
    if (full_block_bytes == 0)  // every layer slides: the sliding pool is the budget
      return budget >= bytes_for(sliding_cap) ? blocks_per_seq * o.n_seq_max : budget / sliding_block_bytes;
    if (budget <= bytes_for(sliding_cap)) return budget / (full_block_bytes + sliding_block_bytes);
    return sliding_cap + (budget - bytes_for(sliding_cap)) / full_block_bytes;
  };
  int64_t n_blocks = blocks_per_seq * o.n_seq_max;
  if (o.kv_cache_max_bytes > 0)
    n_blocks = std::max<int64_t>(1, std::min(n_blocks, blocks_within(o.kv_cache_max_bytes - state_bytes)));
  if (o.kv_cache_bytes > 0) {
    if (o.kv_cache_bytes <= state_bytes)
      throw Error(fmt::format("KV cache of {} bytes does not hold the recurrent state of {} sequences ({} bytes)",
                              o.kv_cache_bytes, state_slots, state_bytes));
    n_blocks = blocks_within(o.kv_cache_bytes - state_bytes);
    if (n_blocks < 1 || n_blocks > (int64_t{1} << 30))
      throw Error(fmt::format("KV cache of {} bytes holds {} blocks of {} bytes: out of range", o.kv_cache_bytes,
                              n_blocks, full_block_bytes + sliding_block_bytes));
  }
  if (n_blocks_exactly > 0) n_blocks = n_blocks_exactly;
  const int64_t sliding_blocks = std::max<int64_t>(1, std::min(n_blocks, sliding_cap));
  return std::make_unique<PagedKvCache>(l, static_cast<int>(n_blocks), o.kv_block_size,
                                        static_cast<int>(blocks_per_seq), static_cast<int>(sliding_blocks),
                                        static_cast<int>(state_slots), memory);
}

}  // namespace kestrel
