// kestrel serve -m MODEL --host 127.0.0.1 --port 8080: the OpenAI-compatible server.
#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "backend/vulkan/vulkan_backend.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "cli/mmproj_flags.h"
#include "serving/http/url_fetch.h"
#include "mmproj/mmproj.h"
#include "cli/parallel_flags.h"
#include "core/error.h"
#include "runtime/generator.h"
#include "serving/http/http_server.h"
#include "serving/telemetry/otlp_exporter.h"
#include "spec/spec_source.h"

namespace kestrel::cli {
namespace {

struct ServeFlags {
  LoadOptions engine;
  std::vector<std::string> served_names;
  bool lora_init_without_apply = false;
  std::vector<std::string> lora_modules;  // NAME=FILE
  std::string host = "127.0.0.1", policy = "fcfs", chat_template, chat_template_kwargs, reasoning_format = "auto", tool_call_parser = "auto", log_format = "text", profile;
  int port = 8080, max_batch_size = 16, max_queue = 256;
  size_t responses_store = 1000;
  std::string pooling;
  bool matryoshka = false;
  HttpLimits limits;
  int http_threads = 2, http_workers = 2;
  std::vector<std::string> api_keys, cors_origins, allowed_hosts;
  std::string api_key_file, ssl_cert_file, ssl_key_file;
  bool protect_metrics = false;
  int64_t max_batch_tokens = 512, prefill_chunk = 256;
  double kv_cache_mem_mib = 0, max_wait_ms = 0, aging_ms = 2000, shutdown_timeout_s = 30;
  std::string spec = "none", draft_model;
  int draft_max = 8;
  bool spec_governed = false;
  bool allow_special_in_content = false;
  std::string otlp_endpoint;
  std::string mmproj, media_path;
  ImageTokenLimits image_tokens;
  int max_images = 16;
  bool allow_media_urls = false;
  double media_url_timeout = 10.0;
  ParallelFlags parallel;
  // The prefix cache's lower tiers (kv/prefix_tiers.h): RAM ("" : the default), a folder and its size.
  std::string cache_ram, cache_dir, cache_disk = "10G", slot_save_path, cache_type;
  bool cache_warm = false;
};

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

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }

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

int run(ServeFlags& f) {
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

  // Request bodies of megabytes come and go: glibc would raise its mmap
  // threshold after the first is freed and keep later ones in its heaps
  // for good (100 refused 4 MiB bodies left ~30 MB resident). A fixed
  // threshold maps every buffer over 256 KiB and gives it back when freed.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);

  // Signals go to the watcher thread below, not to whichever thread they hit.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

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
  std::vector<std::string> served = f.served_names;
  if (served.empty()) served.push_back(std::filesystem::path(f.engine.model_path).filename().string());
  ServerMetrics metrics(served.front());
  // Traces: from the flag or OpenTelemetry's environment (checked before the load: a bad value fails fast).
  std::shared_ptr<SpanExporter> tracer;
  if (const OtlpConfig oc = otlp_config(f.otlp_endpoint, kVersion); !oc.endpoint.empty())
    tracer = std::make_shared<SpanExporter>(oc, &metrics);

  // Rank 0 alone listens and schedules; it listens from the start, so that /health answers and /ready tells
  // the load's progress (a large model takes minutes) instead of a refused connection.
  std::unique_ptr<HttpServer> http;
  std::thread io, watcher;
  // The watcher's view of the process: loading (a signal ends it at once: nothing to drain), serving (a
  // signal drains), or closing (run is ending: the watcher only leaves).
  enum class Phase { Loading, Serving, Closing };
  std::mutex phase_mutex;
  Phase phase = Phase::Loading;
  ServingEngine* serving = nullptr;
  int port = 0;
  const auto close_listener = [&] {
    {
      std::lock_guard lock(phase_mutex);
      if (phase == Phase::Closing) return;  // (closed already)
      phase = Phase::Closing;
    }
    if (!http) return;
    http->stop();
    if (io.joinable()) io.join();
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
  };
  if (!eo.comm || eo.comm->rank() == 0) {
    HttpServerConfig hc;
    hc.host = f.host;
    hc.port = f.port;
    hc.io_threads = f.http_threads;
    hc.worker_threads = f.http_workers;
    hc.limits = f.limits;
    hc.access.api_keys = f.api_keys;
    if (!f.api_key_file.empty())
      for (auto& k : read_api_key_file(f.api_key_file)) hc.access.api_keys.push_back(std::move(k));
    hc.access.protect_metrics = f.protect_metrics;
    if (f.protect_metrics && hc.access.api_keys.empty())
      throw Error("--metrics-require-key needs --api-key or --api-key-file");
    hc.access.cors_origins = f.cors_origins;
    hc.access.allowed_hosts = f.allowed_hosts;
    hc.tls_cert_file = f.ssl_cert_file;
    hc.tls_key_file = f.ssl_key_file;
    http = std::make_unique<HttpServer>(metrics, hc);
    port = http->bind();
    fmt::print(stderr, "[kestrel] listening on {}://{}:{} (loading '{}'; GET /ready says when it serves)\n",
               hc.tls_cert_file.empty() ? "http" : "https", f.host, port, f.engine.model_path);
    io = std::thread([&] { http->run(); });
    // SIGTERM/SIGINT: while loading, stop at once; while serving, stop accepting, let in-flight requests
    // finish until the deadline (then cancel them), then close the listener.
    watcher = std::thread([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      std::unique_lock lock(phase_mutex);
      if (phase == Phase::Closing) return;
      if (phase == Phase::Loading) {
        fmt::print(stderr, "[kestrel] signal {} while loading: stopped\n", sig);
        std::_Exit(0);
      }
      lock.unlock();
      fmt::print(stderr, "[kestrel] signal {}: draining (up to {} s)\n", sig, f.shutdown_timeout_s);
      http->set_draining(fmt::format("signal {}: finishing the requests in flight (up to {} s), taking no new ones",
                                     sig, f.shutdown_timeout_s));
      serving->shutdown(static_cast<int>(f.shutdown_timeout_s * 1000));
      http->stop();
    });
    eo.on_stage = [&](const std::string& stage) { http->readiness().loading(stage); };
  }
  try {
    LoadedModel e = LoadedModel::load(eo);
    if (e.is_follower()) return follow_leader(e, f.profile);
    std::unique_ptr<SpecSource> spec;
    if (f.spec != "none") {
      http->readiness().loading("loading the draft model");
      LoadOptions d;
      d.model_path = f.draft_model;
      d.n_threads = eo.n_threads;
      d.n_seq_max = f.max_batch_size;  // a draft sequence per batch slot, at full context
      d.max_batch_tokens = f.max_batch_tokens;
      spec = std::make_unique<SpecSource>(f.spec, e, d);
    }
    // The prefix cache's lower tiers: RAM by default (2 GiB, at most a quarter of free memory), disk with
    // --cache-dir. Not under tensor parallelism (each rank holds part of every block).
    std::unique_ptr<PrefixTiers> tiers;
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
        if (!tc.disk_dir.empty()) http->readiness().loading("opening the prefix cache");
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
    http->readiness().loading("warming up");
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
    // A tensor-parallel rank gone: the requests get the error, then the server
    // stops as on SIGTERM and the job ends (non-zero: main aborts the MPI job).
    std::mutex fatal_mutex;
    std::string fatal;
    sc.on_fatal = [&](const std::string& why) {
      {
        std::lock_guard lock(fatal_mutex);
        fatal = why;
      }
      fmt::print(stderr, "[kestrel] error: {}; stopping\n", why);
      kill(getpid(), SIGTERM);
    };
    sc.exec.spec_draft_max = f.spec == "none" ? 0 : f.draft_max;
    sc.exec.proposer = spec ? spec->proposer() : nullptr;
    sc.exec.spec_governed = f.spec_governed;
    ServingEngine engine(e, sc, metrics);

    ApiConfig api;
    api.model_names = served;
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
                   f.engine.model_path);
      api.split_reasoning = f.reasoning_format == "deepseek" || (f.reasoning_format == "auto" && tmpl->reasons());
      api.tool_format = f.tool_call_parser == "auto" ? tmpl->tool_format() : *tool_call_format_from_name(f.tool_call_parser);
      api.chat_template = std::move(tmpl);
    }
    api.log_json = f.log_format == "json";
    api.responses_kept = f.responses_store;
    api.pooling = f.pooling.empty() ? -1 : f.pooling == "mean" ? 1 : f.pooling == "cls" ? 2 : 3;
    api.matryoshka = f.matryoshka;
    api.allow_special_in_content = f.allow_special_in_content;
    api.tracer = tracer;
    api.slot_save_path = f.slot_save_path;
    api.n_slots = sc.n_slots;
    api.slot_identity = slot_identity;
    if (f.mmproj.empty()) load_mmproj("", f.image_tokens, e);  // (refuses the image flags without --mmproj)
    if (f.mmproj.empty() && f.allow_media_urls) throw Error("--allow-media-urls needs --mmproj");
    if (!f.mmproj.empty()) {
      http->readiness().loading("loading the multimodal projector");
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
    const ApiConfig shown = api;  // (what the line below prints: api moves into the server)
    {
      std::lock_guard lock(phase_mutex);
      serving = &engine;
      phase = Phase::Serving;
      http->serve(engine, std::move(api));
    }
    std::string tier_line = "prefix cache in the KV pool only";
    if (tiers) {
      const PrefixTiers::Stats ts = tiers->stats();
      tier_line = fmt::format("prefix cache tiers: RAM {}", tiers->has_ram() ? mib(ts.ram.limit) : "off");
      if (e.kv->store().entry_type_name() != e.kv->layout().type_name())
        tier_line += fmt::format(" (entries in {})", e.kv->store().entry_type_name());
      if (tiers->has_disk())
        tier_line += fmt::format(", disk {} of {} in {} ({} entries)", mib(ts.disk.bytes), mib(ts.disk.limit),
                                 tiers->folder(), ts.disk.entries);
    }
    fmt::print(stderr,
               "[kestrel] serving '{}' on {}://{}:{} ({}; context {}, {} KV blocks of {} tokens, KV {} at {}, "
               "{}, chat template {}{}{}{})\n",
               fmt::join(shown.model_names, "', '"), f.ssl_cert_file.empty() ? "http" : "https", f.host, port,
               e.backend->describe(), e.n_ctx, e.kv->n_blocks(), e.kv->block_size(), e.kv->layout().type_name(),
               e.kv->layout().describe_bytes(), tier_line, shown.chat_template->origin(),
               shown.split_reasoning ? ", reasoning split from content" : "",
               shown.tool_format == ToolCallFormat::None
                   ? std::string()
                   : fmt::format(", tool calls read as {}", tool_call_format_name(shown.tool_format)),
               f.api_keys.empty() && f.api_key_file.empty() ? "" : ", API key required");
    if (shown.mmproj && shown.mmproj->vision())
      fmt::print(stderr, "[kestrel] images: {}{}\n", shown.mmproj->vision()->describe(),
                 shown.mmproj->audio_not_run().empty()
                     ? ""
                     : "; its audio encoder (" + shown.mmproj->audio_not_run() +
                           ") is not implemented: audio input is refused");
    if (shown.mmproj && shown.mmproj->audio())
      fmt::print(stderr, "[kestrel] audio: {}\n", shown.mmproj->audio()->describe());
    io.join();  // until a signal (or a fatal error) stops the listener
    close_listener();
    if (e.profiler) {
      e.profiler->write_chrome_trace(f.profile);
      fmt::print(stderr, "[kestrel] profile -> {}\n", f.profile);
    }
    std::lock_guard lock(fatal_mutex);
    if (!fatal.empty()) {
      fmt::print(stderr, "[kestrel] stopped\n");
      throw CommunicatorFailure(fatal);
    }
  } catch (...) {
    close_listener();
    throw;
  }
  fmt::print(stderr, "[kestrel] stopped\n");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app) {
  static ServeFlags f;
  auto* cmd =
      add_command(app, "serve", "OpenAI-compatible HTTP server with continuous batching", [] { return run(f); });
  cmd->add_option("-m,--model", f.engine.model_path, "GGUF model")->required()
      ->envname("KESTREL_MODEL");
  cmd->add_option("--host", f.host, "Address to listen on")->capture_default_str()
      ->envname("KESTREL_HOST");
  cmd->add_option("--port", f.port, "Port (0: any free port, printed at start)")->capture_default_str()
      ->envname("KESTREL_PORT");
  cmd->add_option("-t,--threads", f.engine.n_threads, "Compute threads (0: all cores)")->capture_default_str()
      ->envname("KESTREL_THREADS");
  cmd->add_option("-c,--ctx-size", f.engine.n_ctx, "Context length per request (0: the model's own)")
      ->capture_default_str()
      ->envname("KESTREL_CTX_SIZE");
  cmd->add_option("--max-batch-tokens", f.max_batch_tokens, "Tokens per step, all requests together")
      ->capture_default_str();
  cmd->add_option("--max-batch-size", f.max_batch_size, "Requests per step")->capture_default_str()
      ->envname("KESTREL_MAX_BATCH_SIZE");
  cmd->add_option("--prefill-chunk", f.prefill_chunk, "Prompt tokens per request per step (chunked prefill)")
      ->capture_default_str();
  cmd->add_option("--kv-block-size", f.engine.kv_block_size, "Tokens per KV cache block")->capture_default_str();
  cmd->add_option("--kv-cache-mem", f.kv_cache_mem_mib,
                  "KV cache size in MiB (0: every batch slot at full context, at most a fifth of free memory)")
      ->capture_default_str()
      ->envname("KESTREL_KV_CACHE_MEM");
  cmd->add_option("--cache-ram", f.cache_ram,
                  "Prefix cache RAM tier: KV blocks evicted from the pool are kept here for later prompts (MiB, or "
                  "a size like 4G; 0: off; default 2 GiB, at most a quarter of free memory)")
      ->envname("KESTREL_CACHE_RAM");
  cmd->add_option("--cache-dir", f.cache_dir,
                  "Prefix cache disk tier: computed KV blocks are also written here and found again after a restart")
      ->envname("KESTREL_CACHE_DIR");
  cmd->add_option("--cache-disk", f.cache_disk, "Size limit of the disk tier (MiB, or a size like 20G)")
      ->capture_default_str()
      ->envname("KESTREL_CACHE_DISK");
  cmd->add_flag("--cache-warm", f.cache_warm, "At start, read the most recently used disk entries into RAM");
  cmd->add_option("--cache-type", f.cache_type,
                  "KV type of the tiers' entries (f32, f16, bf16, q8_0, fp8, q4; default: the KV cache's own): "
                  "q8_0 holds ~1.9x the f16 entries in the same RAM, at a small accuracy cost (docs/serving.md)");
  cmd->add_option("--mmproj", f.mmproj,
                  "The model's multimodal projector (llama.cpp's mmproj GGUF): chat requests may then carry images "
                  "(OpenAI image_url, Anthropic image blocks, Responses input_image, Ollama images)");
  cmd->add_option("--media-path", f.media_path, "With --mmproj: file:// image URLs are read from this folder (off by default)");
  add_image_token_options(cmd, f.image_tokens);
  cmd->add_flag("--allow-media-urls", f.allow_media_urls,
                "With --mmproj: fetch images that requests name by http(s) URL (off: they are refused; the server "
                "then reaches whatever its clients name, your own network included)");
  cmd->add_option("--media-url-timeout", f.media_url_timeout, "With --allow-media-urls: seconds one fetch may take "
                                                              "(redirects included)")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  cmd->add_option("--max-images", f.max_images, "With --mmproj: images per request at most")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--slot-save-path", f.slot_save_path,
                  "Folder for llama-server's POST /slots/N?action=save|restore (slots: --max-batch-size of them)");
  cmd->add_option("--scheduling-policy", f.policy, "fcfs or priority (the request field 'priority', lower first)")
      ->capture_default_str();
  cmd->add_option("--max-wait-ms", f.max_wait_ms,
                  "How long an idle server may wait for a batch to fill (priority < 0 skips it)")
      ->capture_default_str();
  cmd->add_option("--aging-ms", f.aging_ms,
                  "Priority policy: a waiting request gains one priority level per this many ms")
      ->capture_default_str();
  cmd->add_option("--spec", f.spec,
                  "Speculative decoding, verified in the batch: none, ngram (prompt lookup), draft (--draft-model), "
                  "mtp (the model's multi-token-prediction block)")
      ->check(CLI::IsMember({"none", "ngram", "draft", "mtp"}))
      ->capture_default_str();
  cmd->add_option("--draft-model", f.draft_model,
                  "With --spec draft: a smaller GGUF model sharing the vocabulary; with --spec mtp: the file the MTP "
                  "block ships in when not in the model's (DeepSeek-V4's mtp-*.gguf)");
  cmd->add_flag("--spec-governed", f.spec_governed,
                "With --spec: stop drafting for a while when decode steps measure slower with it");
  cmd->add_option("--draft-max", f.draft_max, "Most drafted tokens per request per step with --spec")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--max-queue", f.max_queue, "Waiting requests beyond which new ones get 503 + Retry-After")
      ->capture_default_str()
      ->envname("KESTREL_MAX_QUEUE");
  cmd->add_option("--pooling", f.pooling,
                  "Embeddings (/v1/embeddings, /api/embed) pool a sequence's rows this way instead of as the file's "
                  "{arch}.pooling_type says (needed for a file that declares none)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_flag("--matryoshka", f.matryoshka,
                "The model was trained for truncated embeddings: requests may ask for fewer 'dimensions'");
  cmd->add_option("--responses-store", f.responses_store,
                  "Responses (/v1/responses) kept in memory for previous_response_id, the oldest evicted first (0: none)")
      ->capture_default_str();
  add_chat_template_options(cmd, f.chat_template, f.chat_template_kwargs);
  cmd->add_option("--reasoning-format", f.reasoning_format,
                  "deepseek: a chat reply's <think>...</think> goes to message.reasoning_content (streamed as its own "
                  "deltas), the rest to content; none: all of it is content; auto: deepseek when the chat template "
                  "handles <think> (DeepSeek-R1 and distills, QwQ, Qwen3)")
      ->check(CLI::IsMember({"auto", "deepseek", "none"}))
      ->capture_default_str();
  cmd->add_option("--tool-call-parser", f.tool_call_parser,
                  "How replies are read for tool calls when a request offers tools: hermes (<tool_call>), llama3_json, "
                  "deepseek, mistral, dsml (DeepSeek-V3.2/V4), glm (GLM-4.5-4.7's XML), harmony (gpt-oss: the reply's "
                  "channels too), none; auto: the format the chat template writes calls in")
      ->check(CLI::IsMember({"auto", "hermes", "llama3_json", "deepseek", "mistral", "dsml", "glm", "harmony", "none"}))
      ->capture_default_str();
  cmd->add_option("--served-model-name", f.served_names,
                  "Model ids in the API, one or more (repeatable): requests may name any; the first is the one "
                  "metrics and /v1/models list first (default: the file name)")
      ->envname("KESTREL_SERVED_MODEL_NAME");
  cmd->add_flag("--allow-special-in-content", f.allow_special_in_content,
                "Let control tokens spelled in chat message content (e.g. </s>, <｜User｜>) become those tokens "
                "(default: content is text; only the chat template's own markers are control tokens)");
  cmd->add_option("--otlp-endpoint", f.otlp_endpoint,
                  "Export each request's trace spans over OTLP/HTTP (protobuf) to this collector, e.g. "
                  "http://127.0.0.1:4318 (else OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT; docs/deploy.md)");
  cmd->add_option("--log-format", f.log_format, "Per-request log lines on stderr: text or json")->capture_default_str()
      ->envname("KESTREL_LOG_FORMAT");
  cmd->add_option("--http-threads", f.http_threads, "Network threads (connections are asynchronous: any number per thread)")
      ->capture_default_str();
  cmd->add_option("--http-workers", f.http_workers, "Threads that parse and tokenize requests")->capture_default_str();
  cmd->add_option("--max-connections", f.limits.max_connections,
                  "Open connections beyond which new ones get 503 and are closed")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", f.limits.max_body_bytes, "Largest request body (chunked too): 413 beyond")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--header-timeout", f.limits.header_timeout_s,
                  "Seconds from a request's first byte to the end of its head (slow clients are dropped)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--idle-timeout", f.limits.idle_timeout_s, "Seconds a kept-alive connection may wait for a request")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--body-timeout", f.limits.body_timeout_s, "Seconds to receive a request's body after its head")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--write-timeout", f.limits.write_timeout_s,
                  "Seconds a write to a client may take (a client not reading is dropped, its request cancelled)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--api-key", f.api_keys,
                  "Require 'Authorization: Bearer KEY' (repeat for several keys; /health stays open)")
      ->envname("KESTREL_API_KEY");
  cmd->add_option("--api-key-file", f.api_key_file, "API keys, one per line ('#' comments)");
  cmd->add_flag("--metrics-require-key", f.protect_metrics, "/metrics needs an API key too");
  cmd->add_option("--ssl-cert-file", f.ssl_cert_file, "Serve HTTPS with this PEM certificate chain (needs --ssl-key-file)");
  cmd->add_option("--ssl-key-file", f.ssl_key_file, "The PEM private key of --ssl-cert-file");
  cmd->add_option("--cors-origin", f.cors_origins,
                  "Let browsers on this origin call the API (repeat; '*' for any); preflights are answered");
  cmd->add_option("--allowed-host", f.allowed_hosts,
                  "Serve only requests whose Host is this name or name:port (repeat; default: any)");
  cmd->add_option("--shutdown-timeout", f.shutdown_timeout_s, "Seconds in-flight requests get to finish after SIGTERM")
      ->capture_default_str()
      ->envname("KESTREL_SHUTDOWN_TIMEOUT");
  cmd->add_option("--profile", f.profile,
                  "Record every operator's time per layer; the Chrome trace is written at shutdown");
  add_device_option(cmd, f.engine);
  add_lora_options(cmd, f.engine);
  add_control_vector_options(cmd, f.engine);
  cmd->add_flag("--lora-init-without-apply", f.lora_init_without_apply,
                "Load the --lora adapters at scale 0 (POST /lora-adapters or a request's `lora` field applies them)");
  cmd->add_option("--lora-modules", f.lora_modules,
                  "Serve an adapter as a model name: NAME=FILE (a request with model NAME runs the base model with "
                  "that adapter; repeatable)");
  add_mla_option(cmd, f.engine.mla);
  add_kv_type_options(cmd, f.engine.kv_type_k, f.engine.kv_type_v);
  add_parallel_options(cmd, f.parallel);
  cmd->add_flag(
      "--no-repack", [](int64_t) { f.engine.repack_weights = false; }, "Keep quantized weights in the file's layout (llama.cpp's row-dot arithmetic for batches too)");
}

}  // namespace kestrel::cli
