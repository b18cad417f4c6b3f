#include "cli/serve_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "core/error.h"
#include "mmproj/mmproj.h"
#include "runtime/generator.h"
#include "serving/http/url_fetch.h"

namespace kestrel::cli {
namespace {

// --cache-ram and --cache-disk: a plain number is MiB (llama-server's --cache-ram), else a size with K, M or G.
int64_t parse_cache_size(const std::string& s, const char* flag) {
  if (s == "0") return 0;
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return parse_size(s + "M", flag);
  return parse_size(s, flag);
}

// What the cached rows depend on besides the tokens: the model file's contents, where it runs, the KV types,
// block size and layout. (The disk tier's folder is named by it; the RAM tier lives with the process.)
std::string tier_identity(const LoadedModel& e, const LoadOptions& o, const std::string& cache_dir) {
  const KvLayout& l = e.kv->layout();
  return fmt::format(
      "model {} device {} kv {} entries {} block {} layers {} k {} v {} window {} sliding {} ({}x{}) row-stride {} "
      "recurrent {}x{}",
      cache_dir.empty() ? std::string("-") : model_file_identity(o.model_path, cache_dir), o.device, l.type_name(),
      e.kv->store().entry_type_name(),
      e.kv->block_size(), l.n_layer, l.k_width, l.v_width, l.sliding_window, l.n_sliding(), l.sliding_k_width,
      l.sliding_v_width, l.full_row_stride, l.n_recurrent, l.state_floats);
}


// Available memory from /proc/meminfo, in bytes (0 if unknown).
int64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// One token through the model, sampled, before the first request: its weights paged in, the kernels' and
// the step's buffers allocated, so that a ready server runs its first request at full speed.
void warm_up(LoadedModel& e) {
  GenerationParams p;
  p.max_tokens = 1;
  p.ignore_eos = true;
  const int32_t bos = e.tokenizer->vocab().bos;
  generate(e, {bos >= 0 ? bos : 0}, p);
}

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

void check_serve_flags(const ServeFlags& f) {
  if (f.port < 0 || f.port > 65535) throw Error(fmt::format("--port {} is out of range (0 to 65535)", f.port));
  if (f.max_batch_size < 1 || f.max_batch_size > 4096)
    throw Error(fmt::format("--max-batch-size {} is out of range (1 to 4096)", f.max_batch_size));
  if (f.max_batch_tokens < 1) throw Error(fmt::format("--max-batch-tokens {} must be positive", f.max_batch_tokens));
  if (f.prefill_chunk < 1) throw Error(fmt::format("--prefill-chunk {} must be positive", f.prefill_chunk));
  if (f.max_queue < 1) throw Error(fmt::format("--max-queue {} must be positive", f.max_queue));
  if (f.kv_cache_mem_mib < 0) throw Error("--kv-cache-mem must not be negative");
  if (f.policy != "fcfs" && f.policy != "priority")
    throw Error(fmt::format("--scheduling-policy '{}' is not fcfs or priority", f.policy));
  if (f.http_threads < 1 || f.http_threads > 64) throw Error(fmt::format("--http-threads {} is out of range (1 to 64)", f.http_threads));
  if (f.http_workers < 1 || f.http_workers > 64) throw Error(fmt::format("--http-workers {} is out of range (1 to 64)", f.http_workers));
  if (f.log_format != "text" && f.log_format != "json")
    throw Error(fmt::format("--log-format '{}' is not text or json", f.log_format));
}

LoadOptions serve_load_options(const ServeFlags& f) {
  LoadOptions eo = f.engine;
  if (f.lora_init_without_apply)
    for (auto& l : eo.loras) l.scale = 0.0f;
  for (const std::string& m : f.lora_modules) {
    const size_t eq = m.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == m.size())
      throw Error(fmt::format("--lora-modules '{}': expected NAME=FILE", m));
    eo.loras.push_back({m.substr(eq + 1), 0.0f, m.substr(0, eq)});
  }
  eo.profile = !f.profile.empty();
  eo.max_batch_tokens = f.max_batch_tokens;
  eo.n_seq_max = f.max_batch_size;
  if (f.kv_cache_mem_mib > 0) eo.kv_cache_bytes = static_cast<int64_t>(f.kv_cache_mem_mib * 1024 * 1024);
  else eo.kv_cache_max_bytes = available_memory() / 5;  // every batch slot at full context, if that fits
  check_draft_model_flags(f.spec, f.draft_model);
  eo.load_mtp = f.spec == "mtp";
  eo.mtp_model = mtp_model_of(f.spec, f.draft_model);
  apply_parallel_flags(f.parallel, eo);
  return eo;
}

std::unique_ptr<ServedModel> build_served_model(const ServeFlags& f, const LoadOptions& eo,
                                                std::unique_ptr<LoadedModel> loaded, const ServedSetup& s) {
  auto m = std::unique_ptr<ServedModel>(new ServedModel());
  m->e_ = std::move(loaded);
  LoadedModel& e = *m->e_;
  if (f.spec != "none") {
    s.stage("loading the draft model");
    LoadOptions d;
    d.model_path = f.draft_model;
    d.n_threads = eo.n_threads;
    d.n_seq_max = f.max_batch_size;  // a draft sequence per batch slot, at full context
    d.max_batch_tokens = f.max_batch_tokens;
    m->spec_ = std::make_unique<SpecSource>(f.spec, e, d);
  }
  // The prefix cache's lower tiers: RAM by default (2 GiB, at most a quarter of free memory), disk with
  // --cache-dir. Not under tensor parallelism (each rank holds part of every block).
  std::unique_ptr<PrefixTiers>& tiers = m->tiers_;
  {
    PrefixTierConfig tc;
    const bool parallel = e.comm != nullptr;
    if (parallel && (!f.cache_ram.empty() || !f.cache_dir.empty()))
      throw Error("--cache-ram and --cache-dir do not work with --parallel yet (each rank holds part of every "
                  "KV block); leave them out");
    tc.ram_bytes = !f.cache_ram.empty() ? parse_cache_size(f.cache_ram, "--cache-ram")
                   : parallel          ? 0
                                       : std::min<int64_t>(int64_t{2} << 30, available_memory() / 4);
    if (!f.cache_dir.empty()) {
      tc.disk_dir = f.cache_dir;
      tc.disk_bytes = parse_cache_size(f.cache_disk, "--cache-disk");
      if (tc.disk_bytes <= 0) throw Error("--cache-disk must be positive with --cache-dir");
    }
    if (f.cache_warm && (f.cache_dir.empty() || tc.ram_bytes == 0))
      throw Error("--cache-warm needs --cache-dir and a RAM tier (--cache-ram above 0)");
    if (!f.cache_type.empty()) {
      const auto t = kv_type_from_name(f.cache_type);
      if (!t) throw Error(fmt::format("--cache-type '{}' is not f32, f16, bf16, q8_0, fp8 or q4", f.cache_type));
      if (tc.ram_bytes == 0 && tc.disk_dir.empty()) throw Error("--cache-type needs a RAM or disk tier");
      e.kv->store().set_entry_type(*t);
    }
    if (tc.ram_bytes > 0 || !tc.disk_dir.empty()) {
      if (!tc.disk_dir.empty()) s.stage("opening the prefix cache");
      tc.identity = tier_identity(e, eo, tc.disk_dir);
      tiers = std::make_unique<PrefixTiers>(tc);
      const KvStore& st = e.kv->store();
      e.kv->blocks().set_tiers(tiers.get(), {st.entry_bytes(TierKind::Full), st.entry_bytes(TierKind::Sliding),
                                             st.entry_bytes(TierKind::State)});
      if (f.cache_warm) {
        const int64_t n = tiers->warm();
        fmt::print(stderr, "[kestrel] prefix cache: {} entries read from {} into RAM\n", n, tiers->folder());
      }
    }
  }
  // One token through the whole model before the first request (weights paged in, kernels' buffers and
  // the step's scratch allocated), so that /ready means a request runs at full speed.
  s.stage("warming up");
  warm_up(e);
  ServingConfig sc;
  sc.tiers = tiers.get();
  std::string slot_identity;
  if (!f.slot_save_path.empty()) {  // llama-server's slot actions, over the prefix cache
    std::error_code ec;
    std::filesystem::create_directories(f.slot_save_path, ec);
    if (!std::filesystem::is_directory(f.slot_save_path))
      throw Error(fmt::format("--slot-save-path {}: not a folder that can be made ({})", f.slot_save_path, ec.message()));
    sc.n_slots = f.max_batch_size;
    slot_identity = tier_identity(e, eo, f.cache_dir.empty() ? f.slot_save_path : f.cache_dir);
  }
  sc.exec.scheduler.max_batch_tokens = f.max_batch_tokens;
  sc.exec.scheduler.max_batch_size = f.max_batch_size;
  sc.exec.scheduler.prefill_chunk = f.prefill_chunk;
  sc.exec.scheduler.policy = f.policy == "priority" ? SchedulingPolicy::Priority : SchedulingPolicy::Fcfs;
  sc.exec.scheduler.max_wait_ms = f.max_wait_ms;
  sc.exec.scheduler.aging_ms = f.aging_ms;
  sc.max_queue = f.max_queue;
  sc.on_fatal = s.on_fatal;
  sc.exec.spec_draft_max = f.spec == "none" ? 0 : f.draft_max;
  sc.exec.proposer = m->spec_ ? m->spec_->proposer() : nullptr;
  sc.exec.spec_governed = f.spec_governed;
  m->engine_ = std::make_unique<ServingEngine>(e, sc, *s.metrics);

  ApiConfig api;
  api.model_names = s.names;
  if (!e.adapters.empty()) {
    std::vector<LoraTable::Entry> entries;
    for (const auto& a : e.adapters) {
      if (!a.name.empty() && std::find(api.model_names.begin(), api.model_names.end(), a.name) != api.model_names.end())
        throw Error(fmt::format("--lora-modules: '{}' is already the model's name", a.name));
      entries.push_back({a.adapter, a.scale, a.name});
      if (!a.name.empty()) api.model_names.push_back(a.name);
    }
    api.lora = std::make_shared<LoraTable>(std::move(entries));
  }
  {
    auto tmpl = std::make_shared<ChatTemplate>(ChatTemplate::from_model(*e.file, f.chat_template));
    if (!f.chat_template_kwargs.empty()) tmpl->set_default_kwargs(parse_chat_template_kwargs(f.chat_template_kwargs));
    if (tmpl->used_fallback())
      fmt::print(stderr, "[kestrel] warning: {} has no chat template; chat requests use chatml (see --chat-template)\n",
                 eo.model_path);
    api.split_reasoning = f.reasoning_format == "deepseek" || (f.reasoning_format == "auto" && tmpl->reasons());
    api.tool_format = f.tool_call_parser == "auto" ? tmpl->tool_format() : *tool_call_format_from_name(f.tool_call_parser);
    api.chat_template = std::move(tmpl);
  }
  api.log_json = f.log_format == "json";
  api.responses_kept = f.responses_store;
  api.pooling = f.pooling.empty() ? -1 : f.pooling == "mean" ? 1 : f.pooling == "cls" ? 2 : 3;
  api.matryoshka = f.matryoshka;
  api.allow_special_in_content = f.allow_special_in_content;
  api.tracer = s.tracer;
  api.slot_save_path = f.slot_save_path;
  api.n_slots = sc.n_slots;
  api.slot_identity = slot_identity;
  if (f.mmproj.empty()) load_mmproj("", f.image_tokens, e);  // (refuses the image flags without --mmproj)
  if (f.mmproj.empty() && f.allow_media_urls) throw Error("--allow-media-urls needs --mmproj");
  if (!f.mmproj.empty()) {
    s.stage("loading the multimodal projector");
    // On the CPU the encoders get their own backend (their own threads): each request's media are encoded on
    // its worker thread, one request at a time, while the engine goes on stepping the other streams (between
    // its steps, a long encode held them all). On a device they share the engine's, between its steps.
    if (parse_device(f.engine.device) < 0 && !(e.comm && e.comm->size() > 1)) {
      CpuBackendOptions bo;
      bo.repack_weights = f.engine.repack_weights;
      api.encoder_backend = make_cpu_backend(f.engine.n_threads > 0 ? f.engine.n_threads : default_thread_count(), bo);
      auto one_at_a_time = std::make_shared<std::mutex>();
      api.media.run_encoder = [one_at_a_time](const std::function<void()>& encode) {
        std::lock_guard<std::mutex> lock(*one_at_a_time);
        encode();
      };
    }
    api.mmproj = load_mmproj(f.mmproj, f.image_tokens, e, api.encoder_backend.get());
    api.media.media_path = f.media_path;
    if (f.allow_media_urls) {
      UrlFetchLimits limits;
      limits.max_bytes = api.media.max_bytes;
      limits.timeout_s = f.media_url_timeout;
      api.media.fetch = [limits](const std::string& url) { return fetch_url(url, limits); };
    }
    api.media.max_images = f.max_images;
    api.media.max_span = std::min(f.prefill_chunk, f.max_batch_tokens);
  }
  m->extra_bytes_ = f.mmproj.empty() ? 0 : static_cast<int64_t>(std::filesystem::file_size(f.mmproj));
  m->shown_ = api;
  m->api_ = std::make_unique<ApiRoutes>(*m->engine_, *s.metrics, std::move(api));
  m->api_->set_offload(s.offload);
  m->router_ = std::make_shared<Router>();
  m->api_->install(*m->router_);
  return m;
}

int64_t ServedModel::bytes() const {
  return static_cast<int64_t>(e_->file ? e_->file->file_size() : 0) + e_->kv->bytes() + extra_bytes_;
}

std::string ServedModel::describe(const ServeFlags& f) const {
  const LoadedModel& e = *e_;
  std::string tier_line = "prefix cache in the KV pool only";
  if (tiers_) {
    const PrefixTiers::Stats ts = tiers_->stats();
    tier_line = fmt::format("prefix cache tiers: RAM {}", tiers_->has_ram() ? mib(ts.ram.limit) : "off");
    if (e.kv->store().entry_type_name() != e.kv->layout().type_name())
      tier_line += fmt::format(" (entries in {})", e.kv->store().entry_type_name());
    if (tiers_->has_disk())
      tier_line += fmt::format(", disk {} of {} in {} ({} entries)", mib(ts.disk.bytes), mib(ts.disk.limit),
                               tiers_->folder(), ts.disk.entries);
  }
  return fmt::format("{}; context {}, {} KV blocks of {} tokens, KV {} at {}, {}, chat template {}{}{}{}",
                     e.backend->describe(), e.n_ctx, e.kv->n_blocks(), e.kv->block_size(), e.kv->layout().type_name(),
                     e.kv->layout().describe_bytes(), tier_line, shown_.chat_template->origin(),
                     shown_.split_reasoning ? ", reasoning split from content" : "",
                     shown_.tool_format == ToolCallFormat::None
                         ? std::string()
                         : fmt::format(", tool calls read as {}", tool_call_format_name(shown_.tool_format)),
                     f.api_keys.empty() && f.api_key_file.empty() ? "" : ", API key required");
}

void ServedModel::print_media() const {
  if (shown_.mmproj && shown_.mmproj->vision())
    fmt::print(stderr, "[kestrel] images: {}{}\n", shown_.mmproj->vision()->describe(),
               shown_.mmproj->audio_not_run().empty()
                   ? ""
                   : "; its audio encoder (" + shown_.mmproj->audio_not_run() +
                         ") is not implemented: audio input is refused");
  if (shown_.mmproj && shown_.mmproj->audio())
    fmt::print(stderr, "[kestrel] audio: {}\n", shown_.mmproj->audio()->describe());
}

}  // namespace kestrel::cli
