// Profiler: every operator of every layer is recorded, the trace round-trips
// through the Chrome format, and the report adds up.
#include <gmock/gmock.h>

#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "core/error.h"
#include "measure/profile_report.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(Profiler, RecordsEachOperatorOfEachLayerAndRoundTrips) {
  LoadOptions o;
  o.model_path = test::shared("models/stories260K.bin");
  o.llama2c_tokenizer = test::shared("models/tok512.bin");
  o.profile = true;
  LoadedModel e = LoadedModel::load(o);
  ASSERT_NE(e.profiler, nullptr);
  GenerationParams p;
  p.max_tokens = 4;
  p.sampling.temperature = 0.0f;
  const auto r = generate(e, {1, 403, 407}, p);
  // 1 prefill step + 3 decode steps, 5 layers each.
  const int steps = 4, layers = 5;
  const auto& ev = e.profiler->events();
  auto count = [&](const std::string& op, int layer) {
    return std::count_if(ev.begin(), ev.end(), [&](const ProfileEvent& x) { return x.op == op && x.layer == layer; });
  };
  for (int l = 0; l < layers; l++) {
    for (const char* op : {"matmul attn_q+attn_k+attn_v+rope", "matmul attn_output", "matmul ffn_gate+ffn_up+swiglu",
                           "matmul ffn_down", "attention"})
      EXPECT_EQ(count(op, l), steps) << op << " layer " << l;
    EXPECT_EQ(count("rmsnorm", l), 2 * steps);
    EXPECT_EQ(count("rope", l), 0);  // fused into the q/k/v pass
  }
  EXPECT_EQ(count("matmul output", -1), steps);
  // The profiled run computes the same tokens as the reference.
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{261, 378, 432, 383}));

  // The fused q/k/v projection: 64x64 + 2 x 32x64 F32 weights, 2 FLOPs per weight per token.
  const auto q = std::find_if(ev.begin(), ev.end(), [](const ProfileEvent& x) { return x.op == "matmul attn_q+attn_k+attn_v+rope"; });
  ASSERT_NE(q, ev.end());
  EXPECT_DOUBLE_EQ(q->flops, 2.0 * 3 * 64 * (64 + 32 + 32));  // the prefill step has 3 tokens
  EXPECT_GE(q->bytes, 64.0 * (64 + 32 + 32) * 4);

  test::TempDir dir;
  e.profiler->write_chrome_trace(dir.file("p.json"));
  const auto back = read_chrome_trace(dir.file("p.json"));
  ASSERT_EQ(back.size(), ev.size());
  EXPECT_EQ(back[5].op, ev[5].op);
  EXPECT_EQ(back[5].layer, ev[5].layer);
  const auto doc = test::read_json(dir.file("p.json"));
  // Complete events, as Perfetto expects, after the metadata naming the process and its tracks.
  size_t complete = 0;
  for (const auto& j : doc["traceEvents"]) {
    ASSERT_TRUE(j["ph"] == "X" || j["ph"] == "M") << j.dump();
    complete += j["ph"] == "X";
    if (j["ph"] == "M" && j["name"] == "process_name") {
      EXPECT_EQ(j["args"]["name"], "rank 0");
    }
  }
  EXPECT_EQ(complete, ev.size());

  const ProfileSummary s = summarize_profile(back);
  EXPECT_EQ(s.n_layers, layers);
  double sum = 0;
  for (const auto& op : s.ops) sum += op.total_ns;
  EXPECT_DOUBLE_EQ(sum, s.total_ns);
  for (size_t i = 1; i < s.ops.size(); i++) EXPECT_GE(s.ops[i - 1].total_ns, s.ops[i].total_ns);
  const std::string svg = render_profile_heatmap_svg(s, "t");
  EXPECT_THAT(svg, ::testing::StartsWith("<svg"));
  EXPECT_THAT(svg, ::testing::HasSubstr("matmul ffn_gate+ffn_up+swiglu layer 4"));
}

TEST(Profiler, BadTraceIsANamedError) {
  test::TempDir dir;
  test::write_bytes(dir.file("x.json"), "{\"nope\": 1}");
  EXPECT_THROW(read_chrome_trace(dir.file("x.json")), Error);
  test::write_bytes(dir.file("y.json"), "not json");
  EXPECT_THROW(read_chrome_trace(dir.file("y.json")), Error);
  EXPECT_THROW(read_chrome_trace(dir.file("missing.json")), Error);
}

}  // namespace
}  // namespace kestrel
