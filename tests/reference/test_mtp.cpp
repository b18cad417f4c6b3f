// DeepSeek-V3 multi-token prediction: a `nextn` block appended to the
// llama.cpp reference model (deepseek3-tiny) whose block passes its input
// through (attention and FFN outputs zeroed), with eh_proj picking either
// the embedding half or the hidden-state half of its input. Then the drafts
// are known in closed form: the embedding half makes a bigram model of the
// output head over the token's embedding (computed here from the weights in
// double), the hidden half re-reads the target's own final state (so it
// drafts the target's last pick again). Greedy output stays the llama.cpp
// reference's whatever the drafts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/fp16.h"
#include "gguf/gguf_writer.h"
#include "model/synth.h"
#include "runtime/generator.h"
#include "spec/mtp_proposer.h"
#include "runtime/sampler.h"
#include "test_support.h"
#include "model/batch_io.h"

namespace kestrel {
namespace {

const char* kReference = "reference/llama.cpp/deepseek3-tiny.f32";

enum class EhPick { Embedding, Hidden };

// deepseek3-tiny (4 layers) + blk.4: a copy of blk.3 with its residual
// writes zeroed, and the nextn tensors. unit_output_norm: the trunk's output
// norm set to ones, so its final hidden state is the plain normalised x.
void write_oracle_mtp(const std::string& path, EhPick pick, bool unit_output_norm) {
  const GgufFile f = GgufFile::open(test::shared(std::string(kReference) + ".gguf"));
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, k == "deepseek2.block_count" ? GgufValue::u32(5) : v);
  w.set_u32("deepseek2.nextn_predict_layers", 1);
  const int64_t dim = *f.get_int("deepseek2.embedding_length");
  static std::vector<float> ones, eh;  // alive until the writer has written
  ones.assign(static_cast<size_t>(dim), 1.0f);
  eh.assign(static_cast<size_t>(2 * dim * dim), 0.0f);
  for (int64_t r = 0; r < dim; r++) eh[r * 2 * dim + (pick == EhPick::Embedding ? r : dim + r)] = 1.0f;
  for (const auto& t : f.tensors()) {
    if (t.name == "output_norm.weight" && unit_output_norm)
      w.add_tensor_bytes(t.name, GgmlType::F32, t.ne, ones.data());
    else
      w.add_tensor_bytes(t.name, t.type, t.ne, t.data);
    if (t.name.rfind("blk.3.", 0) != 0) continue;
    const std::string suffix = t.name.substr(6);
    const bool zero =
        suffix == "attn_output.weight" || suffix == "ffn_down_exps.weight" || suffix == "ffn_down_shexp.weight";
    const uint8_t* data = t.data;
    w.add_tensor("blk.4." + suffix, t.type, t.ne, [data, zero](uint8_t* dst, size_t n) {
      if (zero)
        std::memset(dst, 0, n);  // all-zero bits are 0.0 in every float format here
      else
        std::memcpy(dst, data, n);
    });
  }
  w.add_tensor_bytes("blk.4.nextn.eh_proj.weight", GgmlType::F32, {2 * dim, dim}, eh.data());
  for (const char* n : {"enorm", "hnorm", "shared_head_norm"})
    w.add_tensor_bytes(std::string("blk.4.nextn.") + n + ".weight", GgmlType::F32, {dim}, ones.data());
  w.write_file(path);
}

std::vector<double> row_f64(const GgufTensorInfo& t, int64_t r) {
  const int64_t cols = t.ne[0];
  std::vector<double> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; c++) {
    if (t.type == GgmlType::F16) {
      uint16_t h;
      std::memcpy(&h, t.data + (r * cols + c) * 2, 2);
      out[c] = fp16_to_fp32(h);
    } else {
      float v;
      std::memcpy(&v, t.data + (r * cols + c) * 4, 4);
      out[c] = v;
    }
  }
  return out;
}

void rmsnorm_f64(std::vector<double>& x, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  for (double& v : x) v *= s;
}

// The embedding-half oracle's next token after t: argmax over the head of
// rmsnorm(rmsnorm(embed(t))) (enorm, then the head's norm; unit weights).
int32_t bigram_next(const GgufFile& f, int32_t t) {
  const auto* embd = f.find_tensor("token_embd.weight");
  const auto* out = f.find_tensor("output.weight");
  const double eps = *f.get_double("deepseek2.attention.layer_norm_rms_epsilon");
  std::vector<double> x = row_f64(*embd, t);
  rmsnorm_f64(x, eps);
  rmsnorm_f64(x, eps);
  int32_t best = 0;
  double best_v = -1e300;
  for (int64_t v = 0; v < out->ne[1]; v++) {
    const auto w = row_f64(*out, v);
    double s = 0;
    for (size_t i = 0; i < x.size(); i++) s += w[i] * x[i];
    if (s > best_v) best_v = s, best = static_cast<int32_t>(v);
  }
  return best;
}

struct Recorded {
  std::vector<int32_t> history, draft;
};

// Greedy generation of the reference prompt with MTP drafts, recording each proposal.
GenerationResult generate_with_mtp(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t n, int draft_max,
                                   std::vector<Recorded>* log) {
  MtpProposer mtp(e);
  GenerationParams p;
  p.max_tokens = n;
  p.sampling.temperature = 0.0f;
  p.ignore_eos = true;
  p.spec_draft_max = draft_max;
  test::FunctionProposer recorder(
      [&](const std::vector<int32_t>& history, int max) {
        auto d = mtp.propose(history, max);
        if (log) log->push_back({history, d});
        return d;
      },
      [&](int64_t first, const int32_t* tokens, const float* h, int64_t rows, bool settled) {
        mtp.observe(first, tokens, h, rows, settled);
      });
  p.proposer = &recorder;
  return generate(e, prompt, p);
}

std::vector<int32_t> ids(const nlohmann::json& a) { return a.get<std::vector<int32_t>>(); }

TEST(Mtp, EmbeddingHalfDraftsTheHeadsBigramChainAndOutputStaysTheReference) {
  test::TempDir dir;
  const std::string path = dir.file("mtp-embedding.gguf");
  write_oracle_mtp(path, EhPick::Embedding, false);
  const auto ref = test::read_json(test::shared(std::string(kReference) + ".json"));
  LoadOptions o = test::shared_engine("", 256);
  o.model_path = path;
  o.load_mtp = true;
  LoadedModel e = LoadedModel::load(o);
  EXPECT_EQ(e.model->mtp_layers(), 1);
  EXPECT_EQ(e.model->config().n_layer, 4);
  EXPECT_EQ(e.kv->layout().n_layer, 5);  // the MTP block caches in a layer of its own

  const auto prompt = ids(ref["prompt_ids"]), greedy = ids(ref["greedy_ids"]);
  std::vector<Recorded> log;
  const GenerationResult r = generate_with_mtp(e, prompt, static_cast<int64_t>(greedy.size()), 3, &log);
  EXPECT_EQ(r.tokens, greedy);  // llama.cpp's greedy continuation of the trunk
  ASSERT_GE(log.size(), 4u);
  const GgufFile f = GgufFile::open(path);
  int checked = 0;
  for (const auto& rec : log) {
    if (rec.draft.empty()) continue;
    int32_t t = rec.history.back();
    for (int32_t d : rec.draft) {
      t = bigram_next(f, t);
      EXPECT_EQ(d, t) << "after " << rec.history.size() << " tokens";
    }
    checked++;
  }
  EXPECT_GE(checked, 4);
}

TEST(Mtp, HiddenHalfDraftsTheTargetsLastPickAgain) {
  test::TempDir dir;
  const std::string path = dir.file("mtp-hidden.gguf");
  write_oracle_mtp(path, EhPick::Hidden, true);
  LoadOptions o = test::shared_engine("", 256);
  o.model_path = path;
  o.load_mtp = true;
  LoadedModel e = LoadedModel::load(o);
  const auto ref = test::read_json(test::shared(std::string(kReference) + ".json"));
  const auto prompt = ids(ref["prompt_ids"]);
  GenerationParams plain_params;
  plain_params.max_tokens = 30;
  plain_params.sampling.temperature = 0.0f;
  plain_params.ignore_eos = true;
  const GenerationResult plain = generate(e, prompt, plain_params);
  std::vector<Recorded> log;
  const GenerationResult r = generate_with_mtp(e, prompt, 30, 4, &log);
  EXPECT_EQ(r.tokens, plain.tokens);
  // The MTP row before the last token reads the target's state that picked
  // that token: through a pass-through block and the same head it picks it
  // again, and chaining on its own output state keeps picking it. This holds
  // only when the state handed over is the right position's after every
  // accepted or rejected step.
  int checked = 0;
  for (const auto& rec : log) {
    for (int32_t d : rec.draft) EXPECT_EQ(d, rec.history.back()) << "after " << rec.history.size() << " tokens";
    checked += !rec.draft.empty();
  }
  EXPECT_GE(checked, 5);
}

// The random-weight models with an MTP block the tests below run on: DeepSeek-V3's form (synth tiny-v3
// plus one block) and DeepSeek-V4's tiny (its MTP block hands over and reads 4 residual streams).
struct MtpModel {
  const char* name;
  std::string (*write)(const std::string& path);
};

class MtpModels : public ::testing::TestWithParam<MtpModel> {
 protected:
  std::string write(const test::TempDir& dir) const { return GetParam().write(dir.file("synth-mtp.gguf")); }
};

INSTANTIATE_TEST_SUITE_P(Families, MtpModels,
                         ::testing::Values(MtpModel{"deepseek3", test::write_synth_mtp_model},
                                           MtpModel{"deepseek4", test::write_synth_v4_model},
                                           MtpModel{"glm4moe", test::write_synth_glm4moe_model},
                                           MtpModel{"qwen35", [](const std::string& path) {
                                             return test::write_synth_preset(path, "qwen35", "tiny");
                                           }},
                                           MtpModel{"qwen35moe", [](const std::string& path) {
                                             return test::write_synth_preset(path, "qwen35moe", "tiny");
                                           }}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(MtpModels, RandomMtpBlockKeepsGreedyOutputOnEveryDraftLength) {
  test::TempDir dir;
  const std::string path = write(dir);
  LoadOptions o = test::shared_engine("", 256);
  o.model_path = path;
  LoadedModel plain_engine = LoadedModel::load(o);
  EXPECT_EQ(plain_engine.model->mtp_layers(), 0);  // not asked for: not loaded, no cache layer
  EXPECT_THROW(MtpProposer{plain_engine}, Error);
  o.load_mtp = true;
  LoadedModel e = LoadedModel::load(o);
  EXPECT_EQ(e.kv->layout().n_layer, plain_engine.kv->layout().n_layer + 1);  // the block's own cache layer
  const std::vector<int32_t> prompt = {1, 17, 230, 44, 17, 230, 44, 17, 230, 9};
  GenerationParams p;
  p.max_tokens = 40;
  p.sampling.temperature = 0.0f;
  p.ignore_eos = true;
  const GenerationResult plain = generate(e, prompt, p);
  for (int k : {1, 3, 8}) {
    const GenerationResult r = generate_with_mtp(e, prompt, 40, k, nullptr);
    EXPECT_EQ(r.tokens, plain.tokens) << "draft " << k;
    EXPECT_GT(r.spec_drafted, 0) << "draft " << k;
  }
}

// With a random MTP block (attention over earlier MTP rows matters), each
// draft equals one built directly on the model: the target run over the
// history gives every position's state, forward_mtp over all rows (token
// x_{p+1}, state at p) on a fresh sequence, then greedy chaining. The
// proposer's rows were built piecemeal — prompt rows during prefill, the
// rest before each draft, provisional rows overwritten — and must agree.
TEST_P(MtpModels, IncrementalDraftsEqualDraftsBuiltInOnePass) {
  test::TempDir dir;
  const std::string path = write(dir);
  LoadOptions o = test::shared_engine("", 256);
  o.model_path = path;
  o.load_mtp = true;
  LoadedModel e = LoadedModel::load(o);
  LoadedModel ref = LoadedModel::load(o);
  const std::vector<int32_t> prompt = {1, 17, 230, 44, 17, 230, 44, 17, 230, 9, 300, 12};
  std::vector<Recorded> log;
  generate_with_mtp(e, prompt, 40, 3, &log);
  Model& m = *ref.model;
  const int64_t dim = m.hidden_dim(), nv = m.config().n_vocab;
  int checked = 0;
  for (const auto& rec : log) {
    if (rec.draft.empty()) continue;
    const auto& h = rec.history;
    const auto rows = static_cast<int64_t>(h.size()) - 1;  // positions 0..len-2 have a state and a next token
    ref.kv->remove(0);
    Batch b;
    for (int64_t p = 0; p < rows; p++) b.add(h[p], static_cast<int32_t>(p), 0, false);
    std::vector<float> hidden(static_cast<size_t>(rows * dim)), out(hidden.size()), logits(static_cast<size_t>(nv));
    test::forward_alone(m, *ref.kv, b, logits.data(), hidden.data());
    b.clear();
    for (int64_t p = 0; p < rows; p++) b.add(h[p + 1], static_cast<int32_t>(p), 0, p == rows - 1);
    test::forward_mtp_alone(m, *ref.kv, b, hidden.data(), logits.data(), out.data());
    std::vector<float> state(out.end() - dim, out.end());
    for (size_t i = 0; i < rec.draft.size(); i++) {
      const int32_t want = argmax(logits.data(), nv);
      EXPECT_EQ(rec.draft[i], want) << "draft token " << i << " after " << h.size() << " tokens";
      b.clear();
      b.add(want, static_cast<int32_t>(rows + i), 0, true);
      test::forward_mtp_alone(m, *ref.kv, b, state.data(), logits.data(), out.data());
      std::copy(out.begin(), out.begin() + dim, state.begin());
    }
    checked++;
  }
  EXPECT_GE(checked, 3);
}

// The server drafts for all its decoding requests at once: three sequences
// of different lengths, one catch-up forward and shared chain steps, give
// each the draft it gets alone.
TEST_P(MtpModels, DraftsForSeveralSequencesAtOnceEqualEachAlone) {
  test::TempDir dir;
  const std::string path = write(dir);
  LoadOptions o = test::shared_engine("", 128);
  o.model_path = path;
  o.load_mtp = true;
  o.n_seq_max = 3;
  o.max_batch_tokens = 16;  // the joint catch-up spans several forwards
  const std::vector<std::vector<int32_t>> histories = {
      {1, 5, 9, 5, 9, 5, 30, 31, 32, 33, 34, 35, 36, 37, 38}, {1, 200, 201}, {1, 44, 45, 46, 47, 48, 49, 50, 51}};
  auto drafts = [&](bool together) {
    LoadedModel e = LoadedModel::load(o);
    std::vector<std::unique_ptr<MtpProposer>> ps;
    const int64_t dim = e.model->hidden_dim();
    for (int32_t s = 0; s < 3; s++) {
      ps.push_back(std::make_unique<MtpProposer>(e, s));
      const auto& h = histories[s];
      Batch b;
      for (size_t p = 0; p + 1 < h.size(); p++) b.add(h[p], static_cast<int32_t>(p), s, p + 2 == h.size());
      std::vector<float> hidden(static_cast<size_t>(b.size() * dim)), logits(e.model->config().n_vocab);
      test::forward_alone(e, b, logits.data(), hidden.data());
      ps.back()->observe(0, b.tokens.data(), hidden.data(), b.size(), false);  // caught up only when drafting
    }
    // What the executor's plan allocates before drafting: each sequence's
    // decode position and its draft slots, where the MTP rows are written.
    for (int32_t s = 0; s < 3; s++) e.kv->reserve(s, static_cast<int64_t>(histories[s].size()) + 2 + s);
    std::vector<std::vector<int32_t>> out;
    if (together) {
      std::vector<MtpProposer::Request> reqs;
      for (int s = 0; s < 3; s++) reqs.push_back({ps[s].get(), &histories[s], 2 + s});
      out = MtpProposer::propose(e, reqs);
    } else {
      for (int s = 0; s < 3; s++) out.push_back(ps[s]->propose(histories[s], 2 + s));
    }
    return out;
  };
  const auto alone = drafts(false), together = drafts(true);
  for (int s = 0; s < 3; s++) EXPECT_EQ(alone[s].size(), static_cast<size_t>(2 + s));
  EXPECT_EQ(together, alone);
}

TEST(Mtp, ModelsWithoutMtpLayersAndBadCountsAreRefused) {
  LoadOptions o = test::shared_engine("models/stories260K.gguf", 64);
  o.load_mtp = true;
  LoadedModel e = LoadedModel::load(o);
  try {
    MtpProposer p(e);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no multi-token-prediction layers"), std::string::npos) << err.what();
  }
  test::TempDir dir;
  SynthOptions so;
  so.shape = synth_preset("deepseek2", "tiny");
  GgufWriter w = synth_model(so);
  w.set_u32("deepseek2.nextn_predict_layers", 3);  // as many as block_count
  w.write_file(dir.file("bad.gguf"));
  LoadOptions b;
  b.model_path = dir.file("bad.gguf");
  try {
    LoadedModel::load(b);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("nextn_predict_layers"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace kestrel
