#pragma once
// The server's endpoints as a routing table, apart from the HTTP library:
//   GET  / (the web chat page, chat_page.h)
//   GET  /metrics, /v1/models, /v1/models/{id} (routes_info.cpp; /health and /ready are the transport's,
//        http/readiness.h)
//   POST /tokenize, /detokenize, /apply-template; GET /tokenizer_info (routes_tokenize.cpp)
//   GET  /openapi.json (every endpoint described: src/serving/api/openapi.json, openapi_document.h)
//   POST /v1/completions, /v1/chat/completions  (routes_completion.cpp;
//        "stream": true as server-sent events, completion_stream.h)
//   POST /v1/messages (Anthropic, anthropic_api.h), /v1/messages/count_tokens,
//        /v1/chat/completions/input_tokens
//   POST /api/chat, /api/generate; GET /api/tags, /api/ps, /api/version;
//        POST /api/show (Ollama, ollama_api.h; routes_ollama.cpp)
//   POST /v1/responses, GET /v1/responses/{id} (OpenAI Responses, responses_api.h)
//   POST /infill (llama-server's fill-in-the-middle, infill_api.h)
//   POST /completion, /completions (llama-server's native completion, llama_completion_api.h); GET /props
//   POST /v1/embeddings, /api/embed, /v1/rerank (and /rerank) (embeddings_api.h)
// Requests are admitted on the transport's thread, parsed, validated and
// tokenized through the Offload it gives (set_offload); the generation runs
// on the ServingEngine's thread. No route waits for the engine.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "serving/http/http_types.h"
#include "serving/api/infill_api.h"
#include "serving/api/llama_completion_api.h"
#include "serving/api/lora_api.h"
#include "serving/engine/metrics.h"
#include "serving/http/offload.h"
#include "serving/api/openai_api.h"
#include "serving/api/request_trace.h"
#include "serving/api/responses_api.h"
#include "serving/http/router.h"
#include "serving/engine/serving_engine.h"
#include "chat/chat_template.h"

namespace kestrel {

class Mmproj;

struct ApiConfig {
  std::vector<std::string> model_names;  // --served-model-name: every alias a request may use; the first is primary
  std::shared_ptr<const ChatTemplate> chat_template;  // required for /v1/chat/completions
  bool log_json = false;  // one JSON line per request on stderr, else a short text line
  bool allow_special_in_content = false;  // see ApiContext
  bool split_reasoning = false;
  ToolCallFormat tool_format = ToolCallFormat::None;  // how replies are read for calls when a request offers tools  // --reasoning-format deepseek: <think> text as reasoning_content
  size_t responses_kept = 1000;  // --responses-store: responses kept for previous_response_id (0: none)
  int pooling = -1;              // --pooling: embeddings pool this way (1 mean, 2 cls, 3 last); -1: as the file says
  bool matryoshka = false;       // --matryoshka: the model was trained for truncated embeddings (dimensions < full)
  std::shared_ptr<SpanExporter> tracer;  // --otlp-endpoint: each request's spans (request_trace.h); null: none
  // --slot-save-path: where POST /slots/N?action=save|restore writes and reads (empty: slot actions refused),
  // the slots (ServingConfig::n_slots) and the identity a slot file must carry (kv/prefix_snapshot.h).
  std::string slot_save_path;
  int n_slots = 0;
  std::string slot_identity;
  // The backend the projector's encoders run on when it is not the engine's (the CPU: the encoders' own threads,
  // so that an encode runs on its request's worker thread while the engine steps the other streams); null: the
  // engine's, the encodes between its steps. (Before mmproj: it outlives the encoders.)
  std::shared_ptr<Backend> encoder_backend;
  // The LoRA adapters (serve --lora, --lora-modules: serving/api/lora_api.h); null: none loaded.
  std::shared_ptr<LoraTable> lora;
  // --mmproj: the model's projector, for images in chat requests (null: image parts are refused), and the
  // limits on them (MediaSupport: --media-path, --max-images; vision, audio and, unless set, run_encoder are set
  // by ApiRoutes).
  std::shared_ptr<Mmproj> mmproj;
  MediaSupport media;
};

class ApiRoutes {
 public:
  // A body this small is parsed and tokenized where it arrives (at most
  // ~1.5 ms of tokenizing) rather than crossing to a worker thread and back;
  // larger ones are offloaded, so no network thread stalls on a big prompt.
  static constexpr size_t kInlineBodyBytes = 4096;

  ApiRoutes(ServingEngine& engine, ServerMetrics& metrics, ApiConfig config);
  // Where the slow parts run (default: at once, on the caller's thread).
  void set_offload(Offload offload) { offload_ = std::move(offload); }
  static int64_t unix_seconds();  // now, for "created" fields
  // GET /: the web chat page (chat_page.h).
  static HttpResponse chat_page();
  // Adds every endpoint to the router (which must not outlive this).
  void install(Router& router);
  void set_draining() { draining_ = true; }  // new requests get 503
  // The gauges derived at a scrape (requests waiting, the prefix cache's hit rate), as of now.
  void refresh_metrics() const;
  // Ollama's `details` of the served file (family, parameter size, quantization).
  nlohmann::json ollama_details() const;

 private:
  HttpResponse metrics() const;
  HttpResponse models() const;
  HttpResponse model(const HttpRequest& req) const;
  nlohmann::json model_card(const std::string& name) const;
  HttpResponse tokenize(const HttpRequest& req) const;
  HttpResponse detokenize(const HttpRequest& req) const;
  HttpResponse cache_summary() const;  // GET /cache (routes_cache.cpp)
  HttpResponse slot_action(const HttpRequest& r);  // POST /slots/N?action= (routes_cache.cpp)
  HttpResponse slot_action_checked(const HttpRequest& r);  // (throws ApiError)
  HttpResponse tokenizer_info() const;
  std::string openapi_document() const;  // GET /openapi.json
  HttpResponse apply_template(const HttpRequest& req) const;
  HttpResponse props() const;  // GET /props (llama-server's: the context, modalities, the media marker)
  // The APIs a generation is asked through: each is read into a CompletionAsk by its own reader, runs the same, and
  // is answered in its own shape from the reply's events.
  enum class Api {
    Completions, Chat, Messages, OllamaChat, OllamaGenerate, Responses, Infill, LlamaCompletion, Embeddings, OllamaEmbed,
    Rerank
  };
  // A request prepared, and what its own API's answer needs beside it.
  struct Prepared {
    ParsedRequest p;
    ResponsesRequest responses;  // Api::Responses
    InfillRequest infill;        // Api::Infill
    std::string native_prompt;   // Api::LlamaCompletion: the prompt as text
  };
  HttpResponse completion(const HttpRequest& req, Api api);
  // The request's start, its refusal (if it is one) recorded in its trace.
  HttpResponse traced_start(const HttpRequest& req, Api api, QueueSlot slot, const std::shared_ptr<RequestTrace>& trace);
  HttpResponse start_completion(const HttpRequest& req, Api api, QueueSlot slot, const std::shared_ptr<RequestTrace>& trace);
  Prepared parse(const HttpRequest& req, Api api) const;
  HttpResponse start_embeddings(const HttpRequest& req, Api api, QueueSlot slot, const std::shared_ptr<RequestTrace>& trace);
  static const char* operation_of(Api api);  // gen_ai.operation.name
  // Places in the queue for `total` requests (the first given): a 400 naming `param` when the queue could never
  // hold that many (`what`: how the request counts them), a 503 when it has no room for them now.
  std::optional<HttpResponse> more_slots(QueueSlot first, size_t total, std::vector<QueueSlot>& slots, Api api,
                                         const std::string& param, const std::string& what);
  HttpResponse stored_response(const HttpRequest& req) const;  // GET /v1/responses/{id}
  ApiContext api_context() const;
  // /v1/messages/count_tokens and /v1/chat/completions/input_tokens: the rendered prompt's tokens.
  HttpResponse count_tokens(const HttpRequest& req, Api api) const;
  // Ollama's listings: the served model under each name, with its file's details.
  HttpResponse ollama_tags(bool running) const;
  HttpResponse ollama_show(const HttpRequest& req) const;
  // A refusal in the shape of the API the request speaks.
  static HttpResponse error_for(const ApiError& e, Api api);
  // A route whose whole work runs offloaded.
  RouteHandler offloaded(RouteHandler handler);
  HttpResponse rejected(const ApiError& e, Api api);
  void log_request(int64_t id, int priority, const StreamEvent& end);

  ServingEngine& engine_;
  ServerMetrics& metrics_;
  ApiConfig c_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> next_id_{1};
  int64_t started_ = unix_seconds();  // the model cards' "created"
  std::mutex log_mutex_;
  Offload offload_;
  ResponseStore responses_{c_.responses_kept};
};

}  // namespace kestrel
