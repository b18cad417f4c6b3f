#include "serving/api/embeddings_api.h"

#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <cstring>

#include "core/base64.h"
#include "serving/api/ollama_api.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

constexpr size_t kMaxInputs = 2048;

}  // namespace

EmbeddingRequest parse_embedding_request(const ApiContext& ctx, const ojson& body, bool ollama, int64_t full_dim,
                                         bool matryoshka) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  if (ollama)
    // truncate (Ollama's default true cuts an input to the context): an input too long is refused here instead.
    check_known_fields(body, "", {"model", "input", "dimensions", "truncate", "options"}, {"keep_alive"});
  else
    check_known_fields(body, "", {"model", "input", "encoding_format", "dimensions"}, {"user"});
  EmbeddingRequest r;
  r.ollama = ollama;
  if (ollama) {
    if (!body.contains("model") || !body["model"].is_string()) throw bad_request("model", "'model' is required");
    r.model = body["model"];
    if (ollama_model_name(r.model, ctx.model_names).empty())
      throw ApiError{404, fmt::format("model '{}' not found", r.model), "model", "", ""};
    if (body.contains("options") && !body["options"].is_null() && !(body["options"].is_object() && body["options"].empty()))
      throw bad_request("options", "'options' do not change an embedding here (no sampling): leave them out");
  } else {
    r.model = checked_model_name(ctx, body);
  }
  r.inputs = token_prompts(ctx, body, "input", kMaxInputs, false);
  for (size_t i = 0; i < r.inputs.size(); i++)
    if (static_cast<int64_t>(r.inputs[i].size()) > ctx.n_ctx)
      throw ApiError{400,
                     fmt::format("input {} has {} tokens but the context holds {}", i, r.inputs[i].size(), ctx.n_ctx),
                     r.inputs.size() > 1 ? fmt::format("input[{}]", i) : "input", "invalid_request_error",
                     "context_length_exceeded"};
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const ojson& f = body["encoding_format"];
    if (f != "float" && f != "base64")
      throw bad_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const ojson& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > full_dim)
      throw bad_request("dimensions",
                        fmt::format("'dimensions' must be an integer from 1 to {} (the model's)", full_dim));
    if (d.get<int64_t>() < full_dim && !matryoshka)
      throw bad_request("dimensions",
                        fmt::format("'dimensions' {} is less than the model's {}: truncation is only meaningful for "
                                    "a model trained for it (Matryoshka); start the server with --matryoshka if it was",
                                    d.get<int64_t>(), full_dim));
    r.dimensions = d;
  }
  return r;
}

EmbeddingRequest parse_rerank_request(const ApiContext& ctx, const ojson& body, const std::string& rerank_template) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  check_known_fields(body, "", {"model", "query", "documents", "top_n", "return_documents"});
  EmbeddingRequest r;
  r.rerank = true;
  r.model = checked_model_name(ctx, body);
  if (!body.contains("query") || !body["query"].is_string()) throw bad_request("query", "'query' must be a string");
  const std::string query = body["query"];
  if (!body.contains("documents") || !body["documents"].is_array() || body["documents"].empty())
    throw bad_request("documents", "'documents' must be a non-empty array of strings");
  if (body["documents"].size() > kMaxInputs)
    throw bad_request("documents",
                      fmt::format("'documents' holds {}; at most {}", body["documents"].size(), kMaxInputs));
  if (rerank_template.empty())
    throw bad_request("model",
                      "this model has no rerank template (tokenizer.chat_template.rerank) to put the query and a "
                      "document in");
  for (size_t i = 0; i < body["documents"].size(); i++) {
    const ojson& d = body["documents"][i];
    const std::string param = fmt::format("documents[{}]", i);
    std::string text;
    if (d.is_string())
      text = d;
    else if (d.is_object() && d.contains("text") && d["text"].is_string())
      text = d["text"];
    else
      throw bad_request(param, fmt::format("'{}' must be a string or {{\"text\": ...}}", param));
    std::string prompt = rerank_template;
    for (const auto& [key, value] : {std::pair<std::string, const std::string*>{"{query}", &query}, {"{document}", &text}})
      for (size_t at = 0; (at = prompt.find(key, at)) != std::string::npos; at += value->size())
        prompt.replace(at, key.size(), *value);
    r.inputs.push_back(ctx.tokenizer.encode(prompt, false, true));
    if (static_cast<int64_t>(r.inputs.back().size()) > ctx.n_ctx)
      throw ApiError{400, fmt::format("document {} with the query takes {} tokens but the context holds {}", i,
                                      r.inputs.back().size(), ctx.n_ctx),
                     param, "invalid_request_error", "context_length_exceeded"};
    r.documents.push_back(std::move(text));
  }
  r.top_n = r.documents.size();
  if (body.contains("top_n") && !body["top_n"].is_null()) {
    if (!body["top_n"].is_number_integer() || body["top_n"].get<int64_t>() < 1)
      throw bad_request("top_n", "'top_n' must be a positive integer");
    r.top_n = std::min<size_t>(r.top_n, body["top_n"].get<size_t>());
  }
  if (body.contains("return_documents") && !body["return_documents"].is_null()) {
    if (!body["return_documents"].is_boolean())
      throw bad_request("return_documents", "'return_documents' must be true or false");
    r.return_documents = body["return_documents"];
  }
  return r;
}

std::vector<float> finish_embedding(const std::vector<float>& pooled, int64_t dimensions) {
  std::vector<float> v(pooled.begin(), dimensions > 0 ? pooled.begin() + dimensions : pooled.end());
  double norm = 0;
  for (const float x : v) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  if (norm > 0)
    for (float& x : v) x = static_cast<float>(x / norm);
  return v;
}

void EmbeddingsAnswer::on_ready(std::function<void()> ready) {
  for (auto& c : channels_) c->on_ready(ready);
}

void EmbeddingsAnswer::ended() {
  total_.done = true;
  if (on_end_) on_end_(total_);
  on_end_ = nullptr;
}

HttpResponse EmbeddingsAnswer::failure(const std::string& message) const {
  const ApiError e{500, "embedding failed: " + message, "", "server_error", ""};
  return req_.ollama ? ollama_error_response(e) : error_response(e);
}

std::optional<HttpResponse> EmbeddingsAnswer::poll() {
  if (answered_) return std::nullopt;
  for (size_t i = 0; i < channels_.size(); i++) {
    if (done_[i]) continue;
    for (auto& e : channels_[i]->take()) {
      if (!e.embedding.empty()) vectors_[i] = req_.rerank ? e.embedding : finish_embedding(e.embedding, req_.dimensions);
      if (!e.done) continue;
      done_[i] = true;
      prompt_tokens_ += e.prompt_tokens;
      total_.prompt_tokens += e.prompt_tokens;
      total_.cached_tokens += e.cached_tokens;
      total_.queue_ms = std::max(total_.queue_ms, e.queue_ms);
      total_.e2e_ms = std::max(total_.e2e_ms, e.e2e_ms);
      if (e.prefill_steps_ms.size() > total_.prefill_steps_ms.size()) total_.prefill_steps_ms = e.prefill_steps_ms;
      if (e.finish_reason == "error" || e.finish_reason == "cancelled" || vectors_[i].empty()) {
        answered_ = true;
        close(false);
        const std::string why =
            e.error.empty() ? "the request ended without a vector (" + e.finish_reason + ")" : e.error;
        total_.finish_reason = "error";
        total_.error = why;
        ended();
        return failure(why);
      }
    }
  }
  for (const bool d : done_)
    if (!d) return std::nullopt;
  answered_ = true;
  total_.finish_reason = "stop";
  ended();
  if (req_.rerank) {  // the first label's probability (Qwen3-Reranker: "yes"), best first
    std::vector<size_t> order(vectors_.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return vectors_[a][0] > vectors_[b][0]; });
    json results = json::array();
    for (size_t k = 0; k < req_.top_n; k++) {
      json item = {{"index", order[k]}, {"relevance_score", vectors_[order[k]][0]}};
      if (req_.return_documents) item["document"] = {{"text", req_.documents[order[k]]}};
      results.push_back(std::move(item));
    }
    return json_response(json_text({{"model", req_.model}, {"object", "list"}, {"results", results},
                                    {"usage", {{"prompt_tokens", prompt_tokens_}, {"total_tokens", prompt_tokens_}}}}));
  }
  if (req_.ollama) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - arrival_).count();
    return json_response(json_text({{"model", req_.model}, {"embeddings", vectors_}, {"total_duration", ns},
                                    {"load_duration", 0}, {"prompt_eval_count", prompt_tokens_}}));
  }
  json data = json::array();
  for (size_t i = 0; i < vectors_.size(); i++) {
    json item = {{"object", "embedding"}, {"index", i}};
    if (req_.base64)
      item["embedding"] = base64_encode(std::string_view(reinterpret_cast<const char*>(vectors_[i].data()),
                                                         vectors_[i].size() * sizeof(float)));
    else
      item["embedding"] = vectors_[i];
    data.push_back(std::move(item));
  }
  return json_response(json_text({{"object", "list"},
                                  {"data", data},
                                  {"model", req_.model},
                                  {"usage", {{"prompt_tokens", prompt_tokens_}, {"total_tokens", prompt_tokens_}}}}));
}

void EmbeddingsAnswer::close(bool) {
  for (size_t i = 0; i < channels_.size(); i++)
    if (!done_[i]) channels_[i]->cancel();
}

}  // namespace kestrel
