// GET /metrics, /v1/models, and the table of every route.
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "serving/api/api_routes.h"

#include <random>

#include "mmproj/mmproj.h"
#include "serving/api/chat_page.h"
#include "serving/api/ollama_api.h"
#include "serving/api/openapi_document.h"
#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

ApiRoutes::ApiRoutes(ServingEngine& engine, ServerMetrics& metrics, ApiConfig config)
    : engine_(engine), metrics_(metrics), c_(std::move(config)) {
  if (c_.model_names.empty()) throw Error("the server needs at least one model name");
  if (c_.mmproj) {
    c_.media.vision = c_.mmproj->vision();
    c_.media.audio = c_.mmproj->audio();
    // A marker no message can spell (llama-server's is random per process too): where the images go in the
    // rendered prompt.
    std::random_device rd;
    c_.media.marker = fmt::format("<__media_{:08x}{:08x}__>", rd(), rd());
    if (!c_.media.run_encoder)  // the encoders on the engine's backend: between its steps
      c_.media.run_encoder = [this](const std::function<void()>& encode) {
        engine_.between_steps([&](LoadedModel&, std::vector<SlotRecord>&) { encode(); });
      };
    c_.media.on_encoded = [this](int64_t images, int64_t encoded, int64_t tokens, double seconds) {
      metrics_.add("kestrel_media_images_total", static_cast<double>(images));
      metrics_.add("kestrel_media_encoded_total", static_cast<double>(encoded));
      metrics_.add("kestrel_media_tokens_total", static_cast<double>(tokens));
      metrics_.add("kestrel_media_encode_seconds_total", seconds);
    };
  }
}

HttpResponse ApiRoutes::chat_page() {
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::string(chat_page_html());
  // Everything the page needs is in it; it talks to this server only (images and audio: the ones a user
  // attaches, read into data: URIs).
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                         "img-src data:; media-src data:");
  return r;
}

void ApiRoutes::install(Router& router) {
  router.add("GET", "/", [](const HttpRequest&) { return chat_page(); });
  router.add("GET", "/metrics", [this](const HttpRequest&) { return metrics(); });
  router.add("GET", "/v1/models", [this](const HttpRequest&) { return models(); });
  router.add("GET", "/v1/models/*", [this](const HttpRequest& r) { return model(r); });
  router.add("POST", "/tokenize", offloaded([this](const HttpRequest& r) { return tokenize(r); }));
  router.add("POST", "/detokenize", offloaded([this](const HttpRequest& r) { return detokenize(r); }));
  router.add("GET", "/tokenizer_info", [this](const HttpRequest&) { return tokenizer_info(); });
  router.add("GET", "/cache", [this](const HttpRequest&) { return cache_summary(); });
  // Always off the I/O threads: a slot action waits for the engine to be between steps.
  router.add("POST", "/slots/*", [this](const HttpRequest& r) {
    return OffloadedResponse::start(offload_, [this, r] { return slot_action(r); });
  });
  router.add("GET", "/openapi.json", [document = openapi_document()](const HttpRequest&) { return json_response(document); });
  router.add("POST", "/apply-template", offloaded([this](const HttpRequest& r) { return apply_template(r); }));
  router.add("POST", "/v1/completions", [this](const HttpRequest& r) { return completion(r, Api::Completions); });
  router.add("POST", "/v1/chat/completions", [this](const HttpRequest& r) { return completion(r, Api::Chat); });
  router.add("POST", "/v1/messages", [this](const HttpRequest& r) { return completion(r, Api::Messages); });
  router.add("POST", "/v1/messages/count_tokens", offloaded([this](const HttpRequest& r) { return count_tokens(r, Api::Messages); }));
  router.add("POST", "/v1/embeddings", [this](const HttpRequest& r) { return completion(r, Api::Embeddings); });
  router.add("POST", "/v1/rerank", [this](const HttpRequest& r) { return completion(r, Api::Rerank); });
  router.add("POST", "/rerank", [this](const HttpRequest& r) { return completion(r, Api::Rerank); });
  router.add("POST", "/api/embed", [this](const HttpRequest& r) { return completion(r, Api::OllamaEmbed); });
  router.add("POST", "/infill", [this](const HttpRequest& r) { return completion(r, Api::Infill); });
  router.add("POST", "/completion", [this](const HttpRequest& r) { return completion(r, Api::LlamaCompletion); });
  router.add("POST", "/completions", [this](const HttpRequest& r) { return completion(r, Api::LlamaCompletion); });
  router.add("GET", "/props", [this](const HttpRequest&) { return props(); });
  // llama-server's adapter list and global scales (serving/api/lora_api.h).
  router.add("GET", "/lora-adapters", [this](const HttpRequest&) {
    return json_response(json_text(c_.lora ? c_.lora->list() : json::array()));
  });
  router.add("POST", "/lora-adapters", [this](const HttpRequest& r) {
    try {
      const auto body = parse_body(r.body);
      if (c_.lora) c_.lora->set_scales(body);
      else if (!body.is_array() || !body.empty()) throw bad_request("body", "the server has no LoRA adapters (--lora)");
    } catch (const ApiError& e) {
      return error_response(e);
    }
    return json_response(json_text({{"success", true}}));
  });
  router.add("POST", "/v1/responses", [this](const HttpRequest& r) { return completion(r, Api::Responses); });
  router.add("GET", "/v1/responses/*", [this](const HttpRequest& r) { return stored_response(r); });
  router.add("POST", "/api/chat", [this](const HttpRequest& r) { return completion(r, Api::OllamaChat); });
  router.add("POST", "/api/generate", [this](const HttpRequest& r) { return completion(r, Api::OllamaGenerate); });
  router.add("GET", "/api/tags", [this](const HttpRequest&) { return ollama_tags(false); });
  router.add("GET", "/api/ps", [this](const HttpRequest&) { return ollama_tags(true); });
  router.add("GET", "/api/version", [](const HttpRequest&) {
    return json_response(json_text({{"version", kOllamaApiVersion}}));
  });
  router.add("POST", "/api/show", offloaded([this](const HttpRequest& r) { return ollama_show(r); }));
  router.add("POST", "/v1/chat/completions/input_tokens",
             offloaded([this](const HttpRequest& r) { return count_tokens(r, Api::Chat); }));
}

// llama-server's GET /props, the part that holds here: the context, the chat template, what media the server takes
// and the marker its /completion prompts put them at (llama.cpp's `<__media__>` is taken too).
HttpResponse ApiRoutes::props() const {
  json modalities = {{"vision", c_.media.vision != nullptr}, {"audio", c_.media.audio != nullptr}};
  json o = {{"default_generation_settings", {{"n_ctx", engine_.n_ctx()}}},
            {"total_slots", c_.n_slots},
            {"model_alias", c_.model_names.front()},
            {"modalities", modalities},
            {"chat_template", c_.chat_template ? c_.chat_template->source() : std::string()}};
  if (c_.mmproj) o["media_marker"] = c_.media.marker;
  return json_response(json_text(o));
}

// The built-in document with the names this server answers to as ModelName's values and its vocabulary's last id as
// TokenId's maximum, so a client (or a fuzzer) reading it knows which models and token ids exist.
std::string ApiRoutes::openapi_document() const {
  json doc = json::parse(openapi_json());
  json names = json::array();
  for (const auto& n : c_.model_names) {
    names.push_back(n);
    if (n.find(':') == std::string::npos) names.push_back(n + ":latest");  // Ollama's tagged form
  }
  doc["components"]["schemas"]["ModelName"]["enum"] = names;
  doc["components"]["schemas"]["TokenId"]["maximum"] = engine_.engine().tokenizer->vocab().size() - 1;
  return doc.dump();
}

RouteHandler ApiRoutes::offloaded(RouteHandler handler) {
  return [this, handler = std::move(handler)](const HttpRequest& req) {
    if (req.body.size() <= kInlineBodyBytes) return handler(req);
    return OffloadedResponse::start(offload_, [handler, req] { return handler(req); });
  };
}

int64_t ApiRoutes::unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void ApiRoutes::refresh_metrics() const {
  // As of this scrape, the engine idle or not; and what derives from counters, derived here, not per step.
  const int waiting = engine_.queued();
  metrics_.set("kestrel_requests_waiting", waiting);
  metrics_.set("kestrel_num_requests_waiting", waiting);
  if (const double queried = metrics_.counter("kestrel_prefix_cache_queries_total"); queried > 0)
    metrics_.set("kestrel_prefix_cache_hit_rate", metrics_.counter("kestrel_prefix_cache_hits_total") / queried);
}

HttpResponse ApiRoutes::metrics() const {
  refresh_metrics();
  HttpResponse r = json_response(metrics_.render());
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

json ApiRoutes::model_card(const std::string& name) const {
  return {{"id", name},
          {"object", "model"},
          {"created", started_},
          {"owned_by", "kestrel"},
          {"root", c_.model_names.front()},
          {"max_model_len", engine_.n_ctx()}};
}

HttpResponse ApiRoutes::stored_response(const HttpRequest& req) const {
  const std::string id = req.path.substr(std::string("/v1/responses/").size());
  const auto entry = responses_.get(id);
  if (!entry)
    return error_response({404, fmt::format("no response '{}' is kept here (the last {} stored are kept)", id,
                                            responses_.capacity()),
                           "response_id", "invalid_request_error", "not_found"});
  return json_response(json_text(entry->response));
}

HttpResponse ApiRoutes::models() const {
  json data = json::array();
  for (const auto& name : c_.model_names) data.push_back(model_card(name));
  return json_response(json_text({{"object", "list"}, {"data", data}}));
}

// GET /v1/models/{id}: one card, or a 404 naming the id.
HttpResponse ApiRoutes::model(const HttpRequest& req) const {
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  for (const auto& name : c_.model_names)
    if (name == id) return json_response(json_text(model_card(name)));
  return error_response({404, model_not_found_message(id, c_.model_names), "model", "invalid_request_error", "model_not_found"});
}

}  // namespace kestrel
