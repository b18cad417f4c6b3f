// LoRA adapters and control vectors against llama.cpp: each cell of tests/reference/lora_cells.json
// (tests/compat/lora_cells.py record) is a `kestrel synth` model with `kestrel synth --lora` adapters and/or
// `--control-vector` vectors; the files are regenerated, their sha256 checked, and kestrel's greedy ids and best
// logits with them at the cell's scales (and layer range) compared with llama.cpp's (lora_oracle.cpp:
// llama_set_adapters_lora, llama_set_adapter_cvec) — the prompt whole and in chunks of 3. Then what
// llama.cpp's server does not do: requests with different adapter sets in one step, each getting the ids it gets
// alone, and the prefix cache keeping KV computed under adapters apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "measure/f64_reference.h"
#include "measure/precision_check.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "runtime/step_executor.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

json cells() {
  return json::parse(test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/lora_cells.json"));
}

const json& cell_named(const json& doc, const std::string& name) {
  for (const auto& c : doc["cells"])
    if (c["name"] == name) return c;
  throw Error("no cell " + name);
}

// The cell's model at dir/NAME.gguf and its adapters at dir/NAME.loraI.gguf, regenerated and checked.
struct CellFiles {
  std::string model;
  std::vector<std::string> adapters;
  std::vector<float> scales;
  std::vector<ControlVectorFile> vectors;
  int range[2] = {0, 0};
};
// `kestrel synth` of the cell's model, plus `flag path` and their own arguments (an adapter or vector beside it).
void synth_beside(const json& cell, const std::string& model, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"synth"};
  for (const auto& s : cell["synth"]) args.push_back(s);
  args.insert(args.end(), {"-o", model});
  args.insert(args.end(), extra.begin(), extra.end());
  const auto made = test::run_kestrel(args);
  EXPECT_EQ(made.exit_code, 0) << cell["name"] << ": " << made.err;
}

CellFiles make_cell(const json& cell, test::TempDir& dir) {
  CellFiles f;
  const std::string name = cell["name"];
  f.model = dir.file(name + ".gguf");
  synth_beside(cell, f.model, {});
  // Each adapter (vector): regenerated, its bytes the recorded ones; its path and scale.
  const auto files = [&](const char* key, const char* kind, const char* flag, const auto& take) {
    if (!cell.contains(key)) return;
    for (size_t i = 0; i < cell[key].size(); i++) {
      const json& a = cell[key][i];
      const std::string path = dir.file(name + "." + kind + std::to_string(i) + ".gguf");
      std::vector<std::string> extra = {flag, path};
      for (const auto& s : a["synth"]) extra.push_back(s);
      synth_beside(cell, f.model, extra);
      EXPECT_EQ(test::sha256_of(path), a["sha256"].get<std::string>()) << name << ": synth " << flag;
      take(path, a["scale"].get<float>());
    }
  };
  files("adapters", "lora", "--lora", [&](const std::string& p, float s) {
    f.adapters.push_back(p);
    f.scales.push_back(s);
  });
  files("control_vectors", "cvec", "--control-vector", [&](const std::string& p, float s) { f.vectors.push_back({p, s}); });
  if (cell.contains("layer_range")) f.range[0] = cell["layer_range"][0], f.range[1] = cell["layer_range"][1];
  EXPECT_EQ(test::sha256_of(f.model), cell["sha256"].get<std::string>()) << name;
  return f;
}

LoadedModel load_with(const CellFiles& f, int64_t batch = 512, bool vectors = true, const std::string& device = "cpu") {
  LoadOptions o;
  o.model_path = f.model;
  o.device = device;
  o.n_threads = 2;
  o.n_ctx = 512;
  o.max_batch_tokens = batch;
  o.n_seq_max = 16;
  for (size_t i = 0; i < f.adapters.size(); i++) o.loras.push_back({f.adapters[i], f.scales[i], ""});
  if (vectors) {
    o.control_vectors = f.vectors;
    o.cvec_layer_start = f.range[0];
    o.cvec_layer_end = f.range[1];
  }
  return LoadedModel::load(o);
}

struct Greedy {
  std::vector<int32_t> ids;
  std::vector<float> best;
};
Greedy greedy(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t n, std::shared_ptr<const LoraSet> lora) {
  GenerationParams g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = n;
  g.ignore_eos = true;
  g.prefix_cache = false;
  g.lora = std::move(lora);
  g.all_logits = true;  // (every prompt row's too: the last one's and the sampled rows' are kept)
  Greedy out;
  GenerationCallbacks cb;
  int64_t row = 0;
  const auto first = static_cast<int64_t>(prompt.size()) - 1;
  cb.on_logits = [&](const float* r, int64_t nv) {
    if (row++ >= first) out.best.push_back(*std::max_element(r, r + nv));
  };
  out.ids = generate(e, prompt, g, cb).tokens;
  e.kv->erase(0);
  return out;
}

// The compat rule on ids (a first difference only where llama.cpp's top-2 gap is below 1e-3), and every step's
// best logit up to that point within 2e-3 of llama.cpp's.
void expect_llama_cpps(const json& cell, const Greedy& got, const std::string& how) {
  const std::string name = cell["name"];
  const auto want = cell["ids"].get<std::vector<int32_t>>();
  const auto gaps = cell["gaps"].get<std::vector<double>>();
  const auto best = cell["best"].get<std::vector<double>>();
  ASSERT_EQ(got.ids.size(), want.size()) << name << how;
  ASSERT_GE(got.best.size(), want.size()) << name << how;
  size_t k = 0;
  while (k < want.size() && got.ids[k] == want[k]) k++;
  if (k < want.size()) {
    EXPECT_LT(gaps[k], 1e-3) << name << how << ": id " << got.ids[k] << " at step " << k << " where llama.cpp chose "
                             << want[k] << " by a gap of " << gaps[k];
  }
  for (size_t i = 0; i < std::min(k + 1, want.size()); i++)
    EXPECT_NEAR(got.best[i], best[i], 2e-3) << name << how << ": the best logit at step " << i;
}

TEST(LoraCells, KestrelGivesLlamaCppsIdsAndLogitsWithTheAdaptersApplied) {
  const json doc = cells();
  ASSERT_GE(doc["cells"].size(), 20u);
  test::TempDir dir;
  int vector_cells = 0;
  for (const auto& cell : doc["cells"]) {
    const CellFiles f = make_cell(cell, dir);
    vector_cells += f.vectors.empty() ? 0 : 1;
    const auto prompt = cell["prompt"].get<std::vector<int32_t>>();
    const auto n = static_cast<int64_t>(cell["ids"].size());
    for (int64_t batch : {512, 3}) {
      LoadedModel e = load_with(f, batch);
      ASSERT_EQ(e.adapters.size(), f.adapters.size());
      const auto set = e.default_lora();
      ASSERT_EQ(set == nullptr, f.adapters.empty());
      const Greedy with = greedy(e, prompt, n, set);
      expect_llama_cpps(cell, with, batch == 3 ? " (prompt in chunks of 3)" : "");
      // The adapters and vectors change the model: the logits without them differ (not negligible updates).
      if (set) {
        const Greedy without = greedy(e, prompt, n, nullptr);
        EXPECT_GT(std::abs(without.best[0] - with.best[0]), 1e-3) << cell["name"] << ": the adapter changed nothing";
      }
      if (!f.vectors.empty() && batch == 512) {
        LoadedModel plain = load_with(f, batch, false);
        const Greedy without = greedy(plain, prompt, n, set);
        EXPECT_GT(std::abs(without.best[0] - with.best[0]), 1e-3) << cell["name"] << ": the vectors changed nothing";
      }
    }
    // On the Vulkan backend (lavapipe here): the updates through the device's operators, experts included.
    const std::string name = cell["name"];
    if (name == "llama-two" || name == "qwen3moe-experts" || name == "qwen35-b" || name == "llama-a-cvec") {
      LoadedModel e = load_with(f, 512, true, "vulkan");
      expect_llama_cpps(cell, greedy(e, prompt, n, e.default_lora()), " (Vulkan)");
    }
  }
  EXPECT_GE(vector_cells, 6);
}

// Requests with different adapter sets (none, B, C, B+C, B at another scale) submitted together run in the same
// steps, and each gets the ids it gets alone; the ones llama.cpp recorded (B+C: the llama-two cell) equal its ids.
// Each set's requests, `rounds` times over, submitted together to one executor: every request's greedy ids (by the
// index of its set) and how many steps held all of them.
struct Together {
  std::vector<std::pair<size_t, std::vector<int32_t>>> ids;
  int full_steps = 0;
};
Together run_together(LoadedModel& e, const std::vector<int32_t>& prompt, int64_t n,
                      const std::vector<std::shared_ptr<const LoraSet>>& sets, int rounds) {
  ExecConfig xc;
  xc.scheduler.max_batch_tokens = e.model->max_batch_tokens();
  xc.scheduler.prefill_chunk = e.model->max_batch_tokens();
  xc.scheduler.max_batch_size = 16;
  StepExecutor exec(e, xc);
  std::map<int64_t, std::vector<int32_t>> got;
  std::map<int64_t, size_t> set_of;
  int64_t id = 1;
  for (int round = 0; round < rounds; round++)
    for (size_t i = 0; i < sets.size(); i++, id++) {
      auto req = std::make_unique<Request>();
      req->id = id;
      req->seq = static_cast<int32_t>(id);
      req->params.prompt = prompt;
      req->params.sampling.temperature = 0.0f;
      req->params.max_tokens = n;
      req->params.ignore_eos = true;
      req->params.prefix_cache = false;
      req->params.lora = sets[i];
      set_of[id] = i;
      exec.add(std::move(req));
    }
  Together t;
  size_t finished = 0;
  for (int step = 0; step < 200 && finished < set_of.size(); step++) {
    const auto outs = exec.step(0);
    if (outs.rows == static_cast<int>(set_of.size())) t.full_steps++;
    for (const RequestOutput& out : outs) {
      for (const TokenOutput& tok : out.tokens) got[out.id].push_back(tok.token);
      finished += out.finished ? 1 : 0;
    }
  }
  for (const auto& [rid, i] : set_of) t.ids.emplace_back(i, got[rid]);
  return t;
}

TEST(LoraCells, RequestsWithDifferentAdaptersShareStepsAndEachGetsItsOwnIds) {
  const json doc = cells();
  const json& cell = cell_named(doc, "llama-two");
  test::TempDir dir;
  const CellFiles f = make_cell(cell, dir);
  LoadedModel e = load_with(f);
  const auto& b = e.adapters[0].adapter;
  const auto& c = e.adapters[1].adapter;
  const std::vector<std::shared_ptr<const LoraSet>> sets = {
      nullptr, make_lora_set({{b, 0.7f}}), make_lora_set({{c, 1.0f}}), make_lora_set({{b, 0.7f}, {c, 1.0f}}),
      make_lora_set({{b, 0.3f}})};
  const auto prompt = cell["prompt"].get<std::vector<int32_t>>();
  const int64_t n = 12;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& s : sets) alone.push_back(greedy(e, prompt, n, s).ids);
  EXPECT_EQ(alone[3], cell["ids"].get<std::vector<int32_t>>()) << "B+C alone against llama.cpp";
  for (size_t i = 1; i < sets.size(); i++) EXPECT_NE(alone[i], alone[0]) << "set " << i << " changed nothing";

  // Twice each set, so that rows of one set are not contiguous.
  const Together t = run_together(e, prompt, n, sets, 2);
  EXPECT_GE(t.full_steps, n - 1) << "the requests did not share steps";
  for (const auto& [i, ids] : t.ids) EXPECT_EQ(ids, alone[i]) << "a request of set " << i;
}

// Every family's rows take their own adapter in steps that mix them: each single-adapter cell's model, its
// adapter's requests and plain ones alternating in one batch, each equal to the same request alone (the rows the
// model announces for its products: the layers, the embedding, the head, a family's own inputs and projections).
TEST(LoraCells, EveryFamilysRowsTakeTheirOwnAdapterInMixedSteps) {
  const json doc = cells();
  test::TempDir dir;
  int families = 0;
  for (const auto& cell : doc["cells"]) {
    if (cell["adapters"].size() != 1 || cell.contains("control_vectors")) continue;
    families++;
    const CellFiles f = make_cell(cell, dir);
    LoadedModel e = load_with(f);
    const std::vector<std::shared_ptr<const LoraSet>> sets = {nullptr, e.default_lora()};
    const auto prompt = cell["prompt"].get<std::vector<int32_t>>();
    const int64_t n = 6;
    const std::vector<std::vector<int32_t>> alone = {greedy(e, prompt, n, nullptr).ids, greedy(e, prompt, n, sets[1]).ids};
    const Together t = run_together(e, prompt, n, sets, 2);
    EXPECT_GE(t.full_steps, n - 1) << cell["name"];
    for (const auto& [i, ids] : t.ids) EXPECT_EQ(ids, alone[i]) << cell["name"] << ": a request of set " << i;
  }
  EXPECT_GE(families, 15);
}

// KV computed under adapters is found only under the same adapters: a second request with the same prompt hits
// the prefix cache with the same set, and not without adapters or with another set (whose ids then equal a
// cold run's).
TEST(LoraCells, ThePrefixCacheKeysBlocksByTheAdapterSet) {
  const json doc = cells();
  const json& cell = cell_named(doc, "llama-two");
  test::TempDir dir;
  const CellFiles f = make_cell(cell, dir);
  LoadedModel e = load_with(f);
  const auto b = make_lora_set({{e.adapters[0].adapter, 0.7f}});
  const auto c = make_lora_set({{e.adapters[1].adapter, 1.0f}});
  std::vector<int32_t> prompt;
  for (int i = 0; i < 70; i++) prompt.push_back((i * 37 + 11) % 500 + 1);
  ExecConfig xc;
  xc.scheduler.max_batch_tokens = e.model->max_batch_tokens();
  xc.scheduler.prefill_chunk = e.model->max_batch_tokens();
  StepExecutor exec(e, xc);
  int64_t next_id = 1;
  const auto run = [&](std::shared_ptr<const LoraSet> set, int64_t& cached) {
    auto req = std::make_unique<Request>();
    const int64_t rid = next_id++;
    req->id = rid;
    req->seq = 0;  // (one at a time: each ends before the next; its blocks stay named)
    req->params.prompt = prompt;
    req->params.sampling.temperature = 0.0f;
    req->params.max_tokens = 6;
    req->params.ignore_eos = true;
    req->params.lora = std::move(set);
    exec.add(std::move(req));
    std::vector<int32_t> ids;
    for (int step = 0; step < 100; step++) {
      bool done = false;
      for (const RequestOutput& out : exec.step(0)) {
        for (const TokenOutput& t : out.tokens) ids.push_back(t.token);
        if (out.finished) done = true, cached = out.cached_tokens;
      }
      if (done) break;
    }
    return ids;
  };
  int64_t cached = -1;
  const auto first_b = run(b, cached);
  EXPECT_EQ(cached, 0);
  const auto again_b = run(b, cached);
  EXPECT_GT(cached, 0) << "the same adapters found nothing";
  EXPECT_EQ(again_b, first_b);
  const auto plain = run(nullptr, cached);
  EXPECT_EQ(cached, 0) << "a request without adapters reused KV computed under B";
  EXPECT_EQ(plain, greedy(e, prompt, 6, nullptr).ids);
  const auto under_c = run(c, cached);
  EXPECT_EQ(cached, 0) << "a request under C reused KV computed under B";
  EXPECT_EQ(under_c, greedy(e, prompt, 6, c).ids);
  EXPECT_NE(under_c, first_b);
}

// What an adapter file may not be: for another architecture, for another model's shapes, with a tensor that is
// not a pair member, or (tied head) on the embedding; each a load error naming the file and what is wrong.
TEST(LoraCells, AdaptersThatDoNotFitTheModelAreLoadErrorsNamingWhy) {
  test::TempDir dir;
  const auto synth = [&](const std::vector<std::string>& args) {
    const auto r = test::run_kestrel(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  const std::string model = dir.file("llama.gguf"), other = dir.file("other.gguf");
  synth({"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "-o", model});
  synth({"synth", "--arch", "qwen3", "--preset", "tiny", "--type", "f32", "-o", other, "--lora", dir.file("qwen3.lora")});
  synth({"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "--ffn", "256", "-o", other, "--lora",
         dir.file("wide.lora")});
  synth({"synth", "--arch", "qwen3", "--preset", "tiny", "--type", "f32", "-o", other, "--lora",
         dir.file("tied.lora"), "--lora-embedding"});
  const auto error_of = [&](const std::string& m, const std::string& lora) {
    LoadOptions o;
    o.model_path = m;
    o.n_threads = 1;
    o.n_ctx = 64;
    o.loras.push_back({lora, 1.0f, ""});
    try {
      LoadedModel::load(o);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("(loaded)");
  };
  EXPECT_NE(error_of(model, dir.file("qwen3.lora")).find("is for architecture 'qwen3', the model is 'llama'"),
            std::string::npos);
  const std::string wide = error_of(model, dir.file("wide.lora"));
  EXPECT_NE(wide.find("ffn_"), std::string::npos) << wide;
  EXPECT_NE(wide.find("ffn_down.weight' is 192x64 but lora_a is 256x"), std::string::npos) << wide;
  const std::string tied = error_of(other, dir.file("tied.lora"));
  EXPECT_NE(tied.find("token_embd.weight: the model's output head is token_embd.weight too"), std::string::npos) << tied;
}

// Control vectors that do not fit: another width, a range holding no layer, a family whose llama.cpp graph
// applies none (Mistral Small 4): load errors naming why.
TEST(LoraCells, ControlVectorsThatDoNotFitAreLoadErrorsNamingWhy) {
  test::TempDir dir;
  const std::string model = dir.file("llama.gguf"), other = dir.file("other.gguf"), m4 = dir.file("m4.gguf");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "-o", model, "--control-vector",
            dir.file("ok.cv")},
           {"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "--dim", "128", "-o", other,
            "--control-vector", dir.file("wide.cv")},
           {"synth", "--arch", "mistral4", "--preset", "tiny", "--type", "f32", "-o", m4, "--control-vector",
            dir.file("m4.cv")}})
    ASSERT_EQ(test::run_kestrel(args).exit_code, 0);
  const auto error_of = [&](const std::string& m, const std::string& cv, int start, int end) {
    LoadOptions o;
    o.model_path = m;
    o.n_threads = 1;
    o.n_ctx = 64;
    o.control_vectors.push_back({cv, 1.0f});
    o.cvec_layer_start = start;
    o.cvec_layer_end = end;
    try {
      LoadedModel::load(o);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string("(loaded)");
  };
  EXPECT_EQ(error_of(model, dir.file("ok.cv"), 0, 0), "(loaded)");
  EXPECT_NE(error_of(model, dir.file("wide.cv"), 0, 0).find("'direction.1' is 128 but the model's width is 64"),
            std::string::npos);
  EXPECT_NE(error_of(model, dir.file("ok.cv"), 5, 9).find("no layer of the model's 1 to 1 is in it"), std::string::npos);
  EXPECT_NE(error_of(m4, dir.file("m4.cv"), 0, 0).find("llama.cpp's mistral4 graph applies none"), std::string::npos);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// The model with the adapter at scale 1 and precision-check's recorder.
LoadOptions recorded(const std::string& model, const std::string& lora) {
  LoadOptions o;
  o.model_path = model;
  o.n_threads = 2;
  o.n_ctx = 256;
  o.loras.push_back({lora, 1.0f, ""});
  o.wrap_backend = make_activation_recorder;
  return o;
}

// What llama.cpp leaves out (DeepSeek-V2's MLA projections and output head multiply there without the adapters),
// Kestrel's own answer against the float64 reference (measure/f64_reference.h, its products written out with the
// adapters' updates in double): an adapter on every MLA projection, FFN matrix, expert and the head, the logits and
// every layer's residual within 1e-5 of float64. The reference is no echo: with the adapter in it and not in the
// engine, the logits are far off.
TEST(LoraCells, MlaProjectionsWithAdaptersAgainstTheFloat64Reference) {
  test::TempDir dir;
  const std::string model = dir.file("ds.gguf"), lora = dir.file("ds.lora");
  // (tiny-v3: V3's form, with the query bottleneck attn_q_a / attn_q_b.)
  const auto made = test::run_kestrel({"synth", "--arch", "deepseek2", "--preset", "tiny-v3", "--type", "f32", "--seed",
                                       "2", "-o", model, "--lora", lora, "--lora-rank", "8", "--lora-alpha", "16",
                                       "--lora-only", "attn_q,attn_kv_a_mqa,attn_output,ffn_,output"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  LoadOptions o = recorded(model, lora);
  LoadedModel e = LoadedModel::load(o);
  for (const char* t : {"blk.0.attn_q_a.weight", "blk.1.attn_q_b.weight", "blk.1.attn_kv_a_mqa.weight",
                        "blk.1.attn_output.weight", "output.weight", "blk.1.ffn_gate_exps.weight.0"})
    ASSERT_NE(e.adapters[0].adapter->find(t), nullptr) << t;
  const std::vector<int32_t> tokens = {1, 5, 9, 13, 200, 17, 33, 2, 99, 7, 64};
  const PrecisionReport r = precision_check(e, tokens);
  EXPECT_LT(r.logits, 1e-5);
  for (const auto& l : r.layers) EXPECT_LT(l.residual, 1e-5) << "layer " << l.layer;

  // The control: the engine without the adapter (scale 0), the reference with it.
  o.loras[0].scale = 0.0f;
  o.wrap_backend = nullptr;
  LoadedModel plain = LoadedModel::load(o);
  ASSERT_EQ(plain.default_lora(), nullptr);
  std::vector<float> logits;
  GenerationParams g;
  g.max_tokens = 0;
  g.all_logits = true;
  GenerationCallbacks cb;
  cb.on_logits = [&](const float* row, int64_t nv) { logits.insert(logits.end(), row, row + nv); };
  generate(plain, tokens, g, cb);
  F64Decoder ref(*plain.file, plain.model->config(), plain.n_ctx, 2);
  ref.set_lora({{plain.adapters[0].adapter.get(), 1.0f}});
  ref.run(tokens);
  ASSERT_EQ(ref.logits.size(), logits.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < logits.size(); i++) {
    num += (logits[i] - ref.logits[i]) * (logits[i] - ref.logits[i]);
    den += ref.logits[i] * ref.logits[i];
  }
  EXPECT_GT(std::sqrt(num / den), 1e-2);
}

// Phi-3's fused attn_qkv and ffn_up, which Kestrel cuts into q, k, v and gate, up: an adapter on the fused tensor
// applies to each cut with its rows of B (llama.cpp cannot load this synth file's vocabulary: float64 checks it).
TEST(LoraCells, FusedMatricesCutByTheModelTakeTheirRowsOfBAgainstTheFloat64Reference) {
  test::TempDir dir;
  const std::string model = dir.file("p3.gguf"), lora = dir.file("p3.lora");
  const auto made = test::run_kestrel({"synth", "--arch", "phi3", "--preset", "tiny", "--type", "f32", "--seed", "2",
                                       "-o", model, "--lora", lora, "--lora-rank", "4"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  LoadOptions o = recorded(model, lora);
  LoadedModel e = LoadedModel::load(o);
  for (const char* t : {"blk.0.attn_qkv.weight.q", "blk.0.attn_qkv.weight.k", "blk.0.attn_qkv.weight.v",
                        "blk.1.ffn_up.weight.gate", "blk.1.ffn_up.weight.up"})
    EXPECT_NE(e.adapters[0].adapter->find(t), nullptr) << t;
  const PrecisionReport r = precision_check(e, {1, 5, 9, 13, 200, 17, 33, 2, 99, 7, 64});
  EXPECT_LT(r.logits, 1e-5);
  for (const auto& l : r.layers) EXPECT_LT(l.residual, 1e-5) << "layer " << l.layer;
}

}  // namespace
}  // namespace kestrel
