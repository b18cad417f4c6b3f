// /v1/embeddings (and Ollama's /api/embed) through `kestrel serve`: the
// pooled, L2-normalised final hidden states against a float64 forward pass
// written apart from the kernels (measure/f64_reference.h), the same vector
// alone or in a batch, the pooling a file declares ({arch}.pooling_type) or
// --pooling chooses, base64, Matryoshka dimensions, and the refusals; /v1/rerank on a Qwen3-Reranker-shaped file.
#include <gmock/gmock.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "gguf/gguf_writer.h"
#include "http_json.h"
#include "measure/f64_reference.h"
#include "model/synth.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using ::testing::HasSubstr;

std::vector<double> as_doubles(const json& v) { return v.get<std::vector<double>>(); }

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); i++) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  return ab / std::sqrt(aa * bb);
}

// The float64 reference: the last layer's residual through the output norm, pooled, normalised.
std::vector<double> reference_embedding(LoadedModel& e, const std::vector<int32_t>& tokens, int pooling) {
  const ModelConfig& c = e.model->config();
  F64Decoder ref(*e.file, c, e.n_ctx, 2);
  ref.run(tokens);
  const std::vector<double>& x = ref.residual.back();
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t dim = c.n_embd;
  const GgufTensorInfo* w = e.file->find_tensor("output_norm.weight");
  const auto* wf = reinterpret_cast<const float*>(w->data);
  std::vector<double> pooled(static_cast<size_t>(dim), 0.0);
  for (int64_t t = 0; t < n; t++) {
    if ((pooling == 2 && t != 0) || (pooling == 3 && t != n - 1)) continue;
    double ss = 0;
    for (int64_t d = 0; d < dim; d++) ss += x[t * dim + d] * x[t * dim + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + c.rms_eps);
    for (int64_t d = 0; d < dim; d++) pooled[d] += x[t * dim + d] * inv * wf[d];
  }
  double norm = 0;
  for (double v : pooled) norm += v * v;
  for (double& v : pooled) v /= std::sqrt(norm);
  return pooled;
}

TEST(Embeddings, PooledStatesEqualTheFloat64ReferenceAloneAndInABatch) {
  LoadedModel e = LoadedModel::load(test::shared_engine("models/stories260K.gguf", 256));
  const std::vector<std::string> texts = {"Once upon a time there was a little girl", "The cat sat on the mat.",
                                          "Tom and Lily went to the park to play with a red ball"};
  for (const auto& [name, pooling] : std::vector<std::pair<std::string, int>>{{"mean", 1}, {"cls", 2}, {"last", 3}}) {
    test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256", "--pooling", name});
    auto c = s.client();
    const json batch = test::post_ok(c, "/v1/embeddings", {{"input", texts}});
    ASSERT_EQ(batch["data"].size(), texts.size());
    EXPECT_EQ(batch["object"], "list");
    int64_t tokens = 0;
    for (size_t i = 0; i < texts.size(); i++) {
      EXPECT_EQ(batch["data"][i]["index"], i);
      const auto got = as_doubles(batch["data"][i]["embedding"]);
      const auto ids = e.tokenizer->encode(texts[i], true, false);
      tokens += static_cast<int64_t>(ids.size());
      const auto want = reference_embedding(e, ids, pooling);
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (size_t d = 0; d < got.size(); d++) worst = std::max(worst, std::abs(got[d] - want[d]));
      EXPECT_LT(worst, 2e-5) << name << " input " << i;
      // Alone, the same vector (to 1e-5 cosine).
      const json alone = test::post_ok(c, "/v1/embeddings", {{"input", texts[i]}});
      EXPECT_GT(cosine(as_doubles(alone["data"][0]["embedding"]), got), 1 - 1e-5) << name << " input " << i;
    }
    EXPECT_EQ(batch["usage"]["prompt_tokens"], tokens);
  }
}

TEST(Embeddings, FormatsDimensionsAndRefusals) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "128", "--pooling", "mean", "--matryoshka"});
  auto c = s.client();
  const json full = test::post_ok(c, "/v1/embeddings", {{"input", "Once upon a time"}});
  const auto v = as_doubles(full["data"][0]["embedding"]);
  double norm = 0;
  for (double x : v) norm += x * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  // base64: the same float32s, little-endian.
  const json b64 = test::post_ok(c, "/v1/embeddings", {{"input", "Once upon a time"}, {"encoding_format", "base64"}});
  const auto bytes = base64_decode(b64["data"][0]["embedding"].get<std::string>());
  ASSERT_TRUE(bytes);
  ASSERT_EQ(bytes->size(), v.size() * 4);
  for (size_t i = 0; i < v.size(); i++) {
    float f = 0;
    std::memcpy(&f, bytes->data() + 4 * i, 4);
    EXPECT_EQ(f, static_cast<float>(v[i]));
  }
  // dimensions: the first 16 values, normalised again.
  const json cut = test::post_ok(c, "/v1/embeddings", {{"input", "Once upon a time"}, {"dimensions", 16}});
  const auto w = as_doubles(cut["data"][0]["embedding"]);
  ASSERT_EQ(w.size(), 16u);
  double head = 0;
  for (size_t i = 0; i < 16; i++) head += v[i] * v[i];
  for (size_t i = 0; i < 16; i++) EXPECT_NEAR(w[i], v[i] / std::sqrt(head), 1e-5);
  // Token ids (a list of lists) and Ollama's /api/embed give the same vector as the text.
  const json tok = test::post_ok(c, "/tokenize", {{"content", "Once upon a time"}, {"add_special", true}});
  const json by_ids = test::post_ok(c, "/v1/embeddings", {{"input", {tok["tokens"]}}});
  EXPECT_GT(cosine(as_doubles(by_ids["data"][0]["embedding"]), v), 1 - 1e-6);
  const json ollama = test::post_ok(c, "/api/embed", {{"model", "stories260K.gguf:latest"}, {"input", {"Once upon a time"}}});
  EXPECT_GT(cosine(as_doubles(ollama["embeddings"][0]), v), 1 - 1e-6);
  EXPECT_GT(ollama["prompt_eval_count"].get<int>(), 2);

  auto refused = [&](const std::string& path, const json& body, const std::string& words) {
    auto r = c.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_THAT(r->body, HasSubstr(words));
  };
  refused("/v1/embeddings", {{"input", "x"}, {"dimensions", 65}}, "dimensions");
  refused("/v1/embeddings", {{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format");
  refused("/v1/embeddings", {{"input", json::array()}}, "input");
  refused("/v1/embeddings", {{"input", {"a", ""}}}, "input[1]");
  refused("/v1/embeddings", {{"input", std::string(2000, 'x')}}, "context");
  refused("/v1/embeddings", {{"input", "x"}, {"pooling", "max"}}, "pooling");
  refused("/api/embed", {{"model", "stories260K.gguf"}, {"input", "x"}, {"options", {{"temperature", 1}}}}, "options");
}

// A file that declares its pooling (as Qwen3-Embedding's GGUF does: last) is embedded that way without
// --pooling; a reranking file's pooling (rank) is not an embedding; a file with none is refused by name.
TEST(Embeddings, TheFilesPoolingTypeIsUsed) {
  test::TempDir dir;
  auto write = [&](const std::string& name, int pooling) {
    SynthOptions so;
    so.shape = synth_preset("qwen3", "tiny");
    so.type = GgmlType::F32;
    GgufWriter w = synth_model(so);
    if (pooling >= 0) w.set_u32("qwen3.pooling_type", static_cast<uint32_t>(pooling));
    w.write_file(dir.file(name));
    return dir.file(name);
  };
  const std::string last = write("last.gguf", 3), rank = write("rank.gguf", 4), none = write("none.gguf", -1);
  const json ids = {1, 5, 9, 42, 7, 100};
  json declared, chosen;
  {
    test::ServerProcess s({"-m", last});
    auto c = s.client();
    declared = test::post_ok(c, "/v1/embeddings", {{"input", ids}});
  }
  {
    test::ServerProcess s({"-m", none, "--pooling", "last"});
    auto c = s.client();
    chosen = test::post_ok(c, "/v1/embeddings", {{"input", ids}});
    test::ServerProcess plain({"-m", none});
    auto pc = plain.client();
    auto r = pc.Post("/v1/embeddings", json{{"input", ids}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_THAT(r->body, HasSubstr("qwen3.pooling_type"));
    EXPECT_THAT(r->body, HasSubstr("--pooling"));
  }
  EXPECT_GT(cosine(as_doubles(declared["data"][0]["embedding"]), as_doubles(chosen["data"][0]["embedding"])), 1 - 1e-6);
  test::ServerProcess s({"-m", rank});
  auto c = s.client();
  auto r = c.Post("/v1/embeddings", json{{"input", ids}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("reranking"));
}

// A Qwen3-Reranker-shaped file (pooling rank, cls.output over the labels yes/no, a rerank template), written
// here: each document's score is softmax(cls . the last row's normed state)[yes], checked against the float64
// forward pass; the answer sorted best first, cut to top_n.
TEST(Rerank, ScoresAreTheHeadsProbabilityOverTheFloat64LastStateBestFirst) {
  test::TempDir dir;
  const std::string path = dir.file("rerank.gguf");
  SynthOptions so;
  so.shape = synth_preset("qwen3", "tiny");
  so.type = GgmlType::F32;
  GgufWriter w = synth_model(so);
  w.set_u32("qwen3.pooling_type", 4);
  w.set("qwen3.classifier.output_labels", GgufValue::strings({"yes", "no"}));
  w.set_str("tokenizer.chat_template.rerank", "Judge.\n<Query>: {query}\n<Document>: {document}\nAnswer:");
  const int64_t dim = so.shape.dim;
  const std::vector<float> head = test::random_floats(static_cast<size_t>(2 * dim), 11, 0.5f);
  w.add_tensor_bytes("cls.output.weight", GgmlType::F32, {dim, 2}, head.data());
  w.write_file(path);

  LoadOptions o;
  o.model_path = path;
  o.n_threads = 2;
  o.n_ctx = 256;
  LoadedModel e = LoadedModel::load(o);
  const std::vector<std::string> docs = {"the cat sat", "a dog ran home", "fish swim", "birds sing loudly"};
  test::ServerProcess s({"-m", path, "-c", "256"});
  auto c = s.client();
  const json r = test::post_ok(c, "/v1/rerank", {{"query", "where is the cat"}, {"documents", docs}, {"top_n", 3}});
  ASSERT_EQ(r["results"].size(), 3u);
  std::vector<double> want(docs.size());
  for (size_t i = 0; i < docs.size(); i++) {
    const std::string prompt = "Judge.\n<Query>: where is the cat\n<Document>: " + docs[i] + "\nAnswer:";
    const auto ids = e.tokenizer->encode(prompt, false, true);
    // The last row's normed state (reference_embedding normalises; the head reads it unnormalised: undo).
    F64Decoder ref(*e.file, e.model->config(), e.n_ctx, 2);
    ref.run(ids);
    const std::vector<double>& x = ref.residual.back();
    const auto* wf = reinterpret_cast<const float*>(e.file->find_tensor("output_norm.weight")->data);
    const int64_t t = static_cast<int64_t>(ids.size()) - 1;
    double ss = 0;
    for (int64_t d = 0; d < dim; d++) ss += x[t * dim + d] * x[t * dim + d];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + e.model->config().rms_eps);
    double z[2] = {0, 0};
    for (int k = 0; k < 2; k++)
      for (int64_t d = 0; d < dim; d++) z[k] += head[k * dim + d] * x[t * dim + d] * inv * wf[d];
    want[i] = 1.0 / (1.0 + std::exp(z[1] - z[0]));
  }
  double prev = 2;
  for (const auto& item : r["results"]) {
    const size_t i = item["index"];
    EXPECT_NEAR(item["relevance_score"].get<double>(), want[i], 2e-5) << i;
    EXPECT_LE(item["relevance_score"].get<double>(), prev);  // best first
    prev = item["relevance_score"];
    EXPECT_EQ(item["document"]["text"], docs[i]);
  }
  // The one left out is the worst.
  const double worst = *std::min_element(want.begin(), want.end());
  for (const auto& item : r["results"]) EXPECT_GE(item["relevance_score"].get<double>(), worst);
  const json bare = test::post_ok(c, "/rerank", {{"query", "x"}, {"documents", {"a", "b"}}, {"return_documents", false}});
  EXPECT_FALSE(bare["results"][0].contains("document"));
  EXPECT_GT(bare["usage"]["prompt_tokens"].get<int>(), 4);
  // Not an embedding model; and an embedding model is not a reranker.
  auto refused = c.Post("/v1/embeddings", json{{"input", "x"}}.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  test::ServerProcess stories({"-m", test::shared("models/stories260K.gguf"), "--pooling", "mean"});
  auto sc = stories.client();
  refused = sc.Post("/v1/rerank", json{{"query", "x"}, {"documents", {"a"}}}.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_THAT(refused->body, HasSubstr("not a reranker"));
}

}  // namespace
}  // namespace kestrel
