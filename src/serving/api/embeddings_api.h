#pragma once
// Embeddings: OpenAI's /v1/embeddings and Ollama's /api/embed (and /v1/rerank, a reranker's scores). Each input
// (a string, or token ids) is one request through the scheduler that only
// runs its prefill and keeps every row's final hidden state; the rows are
// pooled as the model file says ({arch}.pooling_type: mean, cls — the
// first row —, last) or as `serve --pooling` chooses for a file that says
// nothing, then L2-normalised (as llama-server and the embedding models'
// cards do). `dimensions` truncates before normalising (Matryoshka), only
// where the server was told the model was trained for it (--matryoshka).
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/http/http_types.h"
#include "serving/api/openai_api.h"
#include "serving/engine/serving_engine.h"

namespace kestrel {

struct EmbeddingRequest {
  std::string model;  // as the request named it
  std::vector<std::vector<int32_t>> inputs;
  // /v1/rerank: each input a (query, document) prompt; scored, sorted, the best top_n answered.
  bool rerank = false;
  std::vector<std::string> documents;
  size_t top_n = 0;
  bool return_documents = true;
  bool base64 = false;      // encoding_format "base64": little-endian float32s, base64
  int64_t dimensions = 0;   // 0: the model's
  bool ollama = false;      // /api/embed: Ollama's answer
};

// Throws ApiError naming the field. full_dim: the model's hidden size; matryoshka: smaller dimensions allowed.
EmbeddingRequest parse_embedding_request(const ApiContext& ctx, const nlohmann::ordered_json& body, bool ollama,
                                         int64_t full_dim, bool matryoshka);

// A /v1/rerank body (query, documents, top_n, return_documents; the shape llama-server and vLLM share):
// each document with the query through the model's rerank template (tokenizer.chat_template.rerank, its
// {query} and {document} replaced, as llama.cpp does). Throws ApiError.
EmbeddingRequest parse_rerank_request(const ApiContext& ctx, const nlohmann::ordered_json& body,
                                      const std::string& rerank_template);

// The vector as sent: the first `dimensions` values, L2-normalised.
std::vector<float> finish_embedding(const std::vector<float>& pooled, int64_t dimensions);

// The answer once every input's vector has come.
class EmbeddingsAnswer : public DeferredResponse {
 public:
  // on_end: called once, when the answer is made (or fails), with the inputs' ends summed: their prompt
  // tokens, the longest queue and end-to-end times, the finish reason ("error" if one failed).
  EmbeddingsAnswer(std::vector<std::shared_ptr<RequestChannel>> channels, EmbeddingRequest req,
                   std::chrono::steady_clock::time_point arrival, std::function<void(const StreamEvent&)> on_end = {})
      : channels_(std::move(channels)), req_(std::move(req)), arrival_(arrival), vectors_(channels_.size()),
        done_(channels_.size(), false), on_end_(std::move(on_end)) {}
  void on_ready(std::function<void()> ready) override;
  std::optional<HttpResponse> poll() override;
  void close(bool completed) override;

 private:
  HttpResponse failure(const std::string& message) const;
  std::vector<std::shared_ptr<RequestChannel>> channels_;
  EmbeddingRequest req_;
  std::chrono::steady_clock::time_point arrival_;
  std::vector<std::vector<float>> vectors_;
  std::vector<bool> done_;
  int64_t prompt_tokens_ = 0;
  bool answered_ = false;
  std::function<void(const StreamEvent&)> on_end_;
  StreamEvent total_;  // the inputs' ends so far, summed
  void ended();        // on_end_ with total_, once
};

}  // namespace kestrel
