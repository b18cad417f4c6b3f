#pragma once
// One model's serving stack for `kestrel serve`: its flags read into a load, the model loaded, then its prefix
// cache tiers, warm-up, engine and API routes (ServedModel). `serve -m` builds one; the model manager
// (serve --models-dir / --models-preset) builds one per loaded model, each from its own flags.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/mmproj_flags.h"
#include "cli/parallel_flags.h"
#include "kv/prefix_tiers.h"
#include "serving/http/http_server.h"
#include "serving/models/model_manager.h"
#include "serving/telemetry/otlp_exporter.h"
#include "spec/spec_source.h"

namespace kestrel::cli {

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
  // Many models (serve --models-dir / --models-preset: serving/models/model_manager.h).
  std::string models_dir, models_preset, models_memory;
  int models_max = 4;
  bool no_models_autoload = false;
  double idle_unload_s = -1;
};

// Checks the flags that do not depend on the model (ranges, names); throws Error naming the flag.
void check_serve_flags(const ServeFlags& f);
// The load the flags ask for (adapters, KV sizing, speculation, parallelism).
LoadOptions serve_load_options(const ServeFlags& f);

// What a served model takes from its server.
struct ServedSetup {
  std::vector<std::string> names;  // the ids it answers to (the first: primary)
  ServerMetrics* metrics = nullptr;
  std::shared_ptr<SpanExporter> tracer;
  Offload offload;
  std::function<void(const std::string&)> stage;     // the load's progress
  std::function<void(const std::string&)> on_fatal;  // a tensor-parallel rank lost (ServingConfig::on_fatal)
};

class ServedModel : public HostedModel {
 public:
  ApiRoutes& api() override { return *api_; }
  const Router& routes() const override { return *router_; }
  ServingEngine& engine() override { return *engine_; }
  int64_t bytes() const override;
  // The ids it answers to: its names, then its --lora-modules names.
  const std::vector<std::string>& names() const { return shown_.model_names; }
  // The serve line's details: backend, context, KV, tiers, template, formats.
  std::string describe(const ServeFlags& f) const;
  void print_media() const;
  LoadedModel& model() { return *e_; }

 private:
  friend std::unique_ptr<ServedModel> build_served_model(const ServeFlags&, const LoadOptions&,
                                                         std::unique_ptr<LoadedModel>, const ServedSetup&);
  // (Destroyed last to first: the routes, the engine, the tiers, the draft, the model.)
  std::unique_ptr<LoadedModel> e_;
  std::unique_ptr<SpecSource> spec_;
  std::unique_ptr<PrefixTiers> tiers_;
  std::unique_ptr<ServingEngine> engine_;
  std::unique_ptr<ApiRoutes> api_;
  std::shared_ptr<Router> router_;
  ApiConfig shown_;  // (what the serve line prints)
  int64_t extra_bytes_ = 0;  // the projector's file
};

// Everything after the model's load: its draft, prefix cache tiers, warm-up, engine and routes.
std::unique_ptr<ServedModel> build_served_model(const ServeFlags& f, const LoadOptions& eo,
                                                std::unique_ptr<LoadedModel> e, const ServedSetup& s);

// Every flag of `kestrel serve` on `cmd`, read into `f` (cmd_serve.cpp).
void add_serve_options(CLI::App* cmd, ServeFlags& f);
// The model manager of `serve --models-dir / --models-preset` (serve_models.cpp): the models found and the
// preset's, each with its own flags (the command line's first, then its preset section's, then the preset's
// [*]); throws Error for a preset key that is no per-model flag, or a model without a file.
std::unique_ptr<ModelManager> make_model_manager(const ServeFlags& f, const CLI::App* cmd, ServerMetrics& metrics,
                                                 std::shared_ptr<SpanExporter> tracer, Offload offload);

}  // namespace kestrel::cli
