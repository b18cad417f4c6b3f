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
#include "cli/serve_model.h"
#include "core/error.h"

namespace kestrel::cli {
namespace {


int run(ServeFlags& f, const CLI::App* cmd) {
  check_serve_flags(f);
  const bool many = !f.models_dir.empty() || !f.models_preset.empty();
  if (many && !f.engine.model_path.empty())
    throw Error("-m serves one model, --models-dir and --models-preset several: give one or the other");
  if (!many && f.engine.model_path.empty()) throw Error("serve needs -m MODEL (or --models-dir DIR, --models-preset FILE)");
  if (many && !f.parallel.spec.empty()) throw Error("--parallel serves one model: it does not go with --models-dir or --models-preset");

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

  LoadOptions eo;
  if (!many) eo = serve_load_options(f);
  std::vector<std::string> served = f.served_names;
  if (served.empty() && !many) served.push_back(std::filesystem::path(f.engine.model_path).filename().string());
  // With many models, each has its own metrics (its model_name label); these are the transport's and manager's.
  ServerMetrics metrics(many ? "" : served.front());
  // Traces: from the flag or OpenTelemetry's environment (checked before the load: a bad value fails fast).
  std::shared_ptr<SpanExporter> tracer;
  if (const OtlpConfig oc = otlp_config(f.otlp_endpoint, kVersion); !oc.endpoint.empty())
    tracer = std::make_shared<SpanExporter>(oc, &metrics);
  // (Before the transport: a response still held by a connection holds a lease on its model.)
  std::unique_ptr<ModelManager> manager;
  std::unique_ptr<ServedModel> model;

  // Rank 0 alone listens and schedules; it listens from the start, so that /health answers and /ready tells
  // the load's progress (a large model takes minutes) instead of a refused connection.
  std::unique_ptr<HttpServer> http;
  std::thread io, watcher;
  // The watcher's view of the process: loading (a signal ends it at once: nothing to drain), serving (a
  // signal drains), or closing (run is ending: the watcher only leaves).
  enum class Phase { Loading, Serving, Closing };
  std::mutex phase_mutex;
  Phase phase = Phase::Loading;
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
               hc.tls_cert_file.empty() ? "http" : "https", f.host, port,
               many ? "the model list" : f.engine.model_path);
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
      const int deadline = static_cast<int>(f.shutdown_timeout_s * 1000);
      if (manager) manager->shutdown(deadline);
      if (model) model->engine().shutdown(deadline);
      http->stop();
    });
    eo.on_stage = [&](const std::string& stage) { http->readiness().loading(stage); };
  }
  try {
    if (many) {
      manager = make_model_manager(f, cmd, metrics, tracer, http->offload());
      manager->set_offload(http->offload());
      {
        std::lock_guard lock(phase_mutex);
        phase = Phase::Serving;
        http->serve([&](Router& r) { manager->install(r); }, [&] { manager->set_draining(); });
      }
      manager->start();
      fmt::print(stderr, "[kestrel] serving '{}' on {}://{}:{} (several models: --models-max {}{}{}; GET /v1/models lists "
                 "them with their state)\n",
                 fmt::join(manager->names(), "', '"), f.ssl_cert_file.empty() ? "http" : "https", f.host, port,
                 f.models_max, f.models_memory.empty() ? "" : ", --models-memory " + f.models_memory,
                 f.no_models_autoload ? ", loaded only by POST /models/load" : ", each loaded by its first request");
      io.join();  // until a signal stops the listener
      close_listener();
      manager->shutdown(0);
      fmt::print(stderr, "[kestrel] stopped\n");
      return 0;
    }
    auto loaded = std::make_unique<LoadedModel>(LoadedModel::load(eo));
    if (loaded->is_follower()) return follow_leader(*loaded, f.profile);
    // A tensor-parallel rank gone: the requests get the error, then the server
    // stops as on SIGTERM and the job ends (non-zero: main aborts the MPI job).
    std::mutex fatal_mutex;
    std::string fatal;
    ServedSetup setup;
    setup.names = served;
    setup.metrics = &metrics;
    setup.tracer = tracer;
    setup.offload = http->offload();
    setup.stage = [&](const std::string& stage) { http->readiness().loading(stage); };
    setup.on_fatal = [&](const std::string& why) {
      {
        std::lock_guard lock(fatal_mutex);
        fatal = why;
      }
      fmt::print(stderr, "[kestrel] error: {}; stopping\n", why);
      kill(getpid(), SIGTERM);
    };
    std::unique_ptr<ServedModel> built = build_served_model(f, eo, std::move(loaded), setup);
    {
      std::lock_guard lock(phase_mutex);
      model = std::move(built);
      phase = Phase::Serving;
      // (The model's own table, built once: its routes after the probes.)
      http->serve(
          [&](Router& r) {
            for (const auto& route : model->routes().routes()) r.add(route.method, route.path, route.handler);
          },
          [&] { model->api().set_draining(); });
    }
    fmt::print(stderr, "[kestrel] serving '{}' on {}://{}:{} ({})\n", fmt::join(model->names(), "', '"),
               f.ssl_cert_file.empty() ? "http" : "https", f.host, port, model->describe(f));
    model->print_media();
    io.join();  // until a signal (or a fatal error) stops the listener
    close_listener();
    if (model->model().profiler) {
      model->model().profiler->write_chrome_trace(f.profile);
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

void add_serve_options(CLI::App* cmd, ServeFlags& f) {
  cmd->add_option("-m,--model", f.engine.model_path, "GGUF model (one; --models-dir or --models-preset: several)")
      ->envname("KESTREL_MODEL");
  cmd->add_option("--models-dir", f.models_dir,
                  "Serve every model in this folder (a *.gguf, or a subfolder with its GGUF, projector and shards), "
                  "each loaded when a request names it (docs/serving.md, \"Many models\")")
      ->envname("KESTREL_MODELS_DIR");
  cmd->add_option("--models-preset", f.models_preset,
                  "Models and their flags from an INI file (llama-server's presets: [name] sections of flag = value; "
                  "[*] for all; pin, load-on-startup, idle-unload)")
      ->envname("KESTREL_MODELS_PRESET");
  cmd->add_option("--models-max", f.models_max,
                  "Models loaded at once (0: no limit); loading one more unloads the least recently used idle one")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option("--models-memory", f.models_memory,
                  "Memory the loaded models may take together (a size like 16G; weights, KV pools, projectors); "
                  "beyond, the least recently used idle ones are unloaded");
  cmd->add_flag("--no-models-autoload", f.no_models_autoload,
                "A request naming an unloaded model is refused (400) instead of loading it: POST /models/load first");
  cmd->add_option("--idle-unload", f.idle_unload_s,
                  "With several models: unload a model after this many seconds without requests (default: never; "
                  "Ollama's keep_alive in a request overrides it)")
      ->check(CLI::Range(0.0, 1e9));
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
      "--no-repack", [&f](int64_t) { f.engine.repack_weights = false; }, "Keep quantized weights in the file's layout (llama.cpp's row-dot arithmetic for batches too)");
}

void register_serve(CLI::App& app) {
  static ServeFlags f;
  static CLI::App* cmd = nullptr;
  cmd = add_command(app, "serve", "OpenAI-compatible HTTP server with continuous batching", [] { return run(f, cmd); });
  add_serve_options(cmd, f);
}

}  // namespace kestrel::cli
