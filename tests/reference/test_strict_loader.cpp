// A model file loads only when Kestrel computes all of it: a tensor the
// architecture does not use, or a metadata key of its namespace that could
// change the arithmetic and is not read, is an error naming it (llama.cpp
// refuses unknown tensors too). Plausible text from the wrong math is the
// worst failure an engine can have.
#include <gmock/gmock.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

// src rewritten: every key and tensor, then `edit` may add or replace some.
std::string rewrite(const std::string& src, const std::string& dst, const std::function<void(GgufWriter&)>& edit,
                    const std::string& drop_tensor = "") {
  const GgufFile f = GgufFile::open(src);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const auto& t : f.tensors())
    if (t.name != drop_tensor) w.add_tensor_bytes(t.name, t.type, t.ne, t.data);
  edit(w);
  w.write_file(dst);
  return dst;
}

std::string load_error(const std::string& path) {
  LoadOptions o;
  o.model_path = path;
  o.n_threads = 2;
  o.n_ctx = 64;
  try {
    LoadedModel::load(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StrictLoader, TheUnmodifiedFilesLoad) {
  for (const char* cell : {"llama32.F16", "gemma2.F16", "phi3.F16", "qwen3moe.F16"})
    EXPECT_EQ(load_error(test::compat_model(cell)), "") << cell;
}

TEST(StrictLoader, AnUnknownTensorIsRefusedByName) {
  test::TempDir dir;
  const std::vector<float> sinks(4, 0.5f);
  const std::string path = rewrite(test::compat_model("llama32.F16"), dir.file("sinks.gguf"), [&](GgufWriter& w) {
    w.add_tensor_bytes("blk.1.attn_sinks.weight", GgmlType::F32, {4}, sinks.data());
  });
  EXPECT_THAT(load_error(path), HasSubstr("tensor 'blk.1.attn_sinks.weight' is not part of the llama architecture"));
}

TEST(StrictLoader, AnUnknownArithmeticKeyIsRefusedByName) {
  test::TempDir dir;
  const std::string softcap = rewrite(test::compat_model("llama32.F16"), dir.file("softcap.gguf"),
                                      [](GgufWriter& w) { w.set_f32("llama.attn_logit_softcapping", 30.0f); });
  EXPECT_THAT(load_error(softcap), HasSubstr("metadata key 'llama.attn_logit_softcapping' (30)"));
  const std::string window = rewrite(test::compat_model("qwen3.F16"), dir.file("window.gguf"),
                                     [](GgufWriter& w) { w.set_u32("qwen3.attention.sliding_window", 4096); });
  EXPECT_THAT(load_error(window), HasSubstr("'qwen3.attention.sliding_window'"));
  // Keys that describe the file, not the math, are fine.
  const std::string vocab = rewrite(test::compat_model("qwen3.F16"), dir.file("vocab.gguf"),
                                    [](GgufWriter& w) { w.set_u32("qwen3.vocab_size", 1003); });
  EXPECT_EQ(load_error(vocab), "");
}

TEST(StrictLoader, BadValuesOfKnownKeysNameTheKey) {
  test::TempDir dir;
  const std::string src = test::compat_model("llama32.F16");
  for (float eps : {0.0f, -1.0f, NAN, INFINITY}) {
    const std::string path = rewrite(src, dir.file("eps.gguf"), [&](GgufWriter& w) {
      w.set_f32("llama.attention.layer_norm_rms_epsilon", eps);
    });
    EXPECT_THAT(load_error(path), HasSubstr("llama.attention.layer_norm_rms_epsilon")) << eps;
  }
  const std::string rope = rewrite(src, dir.file("rope.gguf"), [](GgufWriter& w) {
    w.set_str("llama.rope.scaling.type", "longrope");
  });
  EXPECT_THAT(load_error(rope), HasSubstr("'longrope' is not supported"));
  const std::string split = rewrite(src, dir.file("split.gguf"), [](GgufWriter& w) { w.set_u32("split.count", 3); });
  EXPECT_THAT(load_error(split), HasSubstr("part of a GGUF split into 3 files"));
}

// Sizes from metadata are refused by name before anything is sized from them
// (they used to end in a bare std::bad_alloc), with the context taken from the file.
TEST(StrictLoader, HostileSizesNameTheKeyInsteadOfFailingAnAllocation) {
  test::TempDir dir;
  auto load_at_file_context = [](const std::string& path) -> std::string {
    LoadOptions o;
    o.model_path = path;
    o.n_threads = 1;  // n_ctx 0: the file's context_length
    try {
      LoadedModel::load(o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string src = test::compat_model("llama32.F16");
  for (const char* key : {"llama.context_length", "llama.feed_forward_length", "llama.embedding_length"}) {
    const std::string path = rewrite(src, dir.file("huge.gguf"), [&](GgufWriter& w) { w.set_u32(key, 2147483648u); });
    EXPECT_THAT(load_at_file_context(path), HasSubstr(std::string("'") + key + "' = 2147483648 is beyond any model's"))
        << key;
  }
  for (float eps : {0.0f, -1.0f, NAN, INFINITY}) {
    const std::string path = rewrite(test::shared("reference/llama.cpp/deepseek3-tiny.f32.gguf"), dir.file("ds-eps.gguf"), [&](GgufWriter& w) {
      w.set_f32("deepseek2.attention.layer_norm_rms_epsilon", eps);
    });
    EXPECT_THAT(load_error(path), HasSubstr("deepseek2.attention.layer_norm_rms_epsilon")) << eps;
  }
}

// Sizes within the ceilings but not those of the file's tensors: refused by
// the key, before buffers are sized from the metadata.
TEST(StrictLoader, MetadataSizesMustMatchTheTensors) {
  test::TempDir dir;
  const std::string src = test::compat_model("llama32.F16");
  struct Case {
    const char* key;
    uint32_t value;
    const char* expect;
  };
  for (const Case& k : {Case{"llama.embedding_length", 131072, "'llama.embedding_length' = 131072"},
                        Case{"llama.feed_forward_length", 1048576, "'llama.feed_forward_length' = 1048576"},
                        Case{"llama.attention.head_count", 4096, "'llama.attention.head_count' = 4096"},
                        Case{"llama.attention.head_count_kv", 2, "'llama.attention.head_count_kv' = 2"},
                        Case{"llama.block_count", 4000, "'llama.block_count' = 4000"},
                        Case{"llama.block_count", 2, "'llama.block_count' = 2"}}) {
    const std::string path = rewrite(src, dir.file("mismatch.gguf"), [&](GgufWriter& w) { w.set_u32(k.key, k.value); });
    const std::string err = load_error(path);
    EXPECT_THAT(err, HasSubstr(k.expect)) << k.key;
    EXPECT_THAT(err, HasSubstr("tensor")) << k.key << ": " << err;
  }
  const std::string ds = rewrite(test::shared("reference/llama.cpp/deepseek2-lite-tiny.f32.gguf"), dir.file("ds.gguf"),
                                 [](GgufWriter& w) { w.set_u32("deepseek2.embedding_length", 4096); });
  EXPECT_THAT(load_error(ds), HasSubstr("'deepseek2.embedding_length' = 4096 but tensor 'token_embd.weight'"));
}

TEST(StrictLoader, AMissingTensorOfTheFamilyIsNamed) {
  test::TempDir dir;
  const std::string path = rewrite(test::compat_model("gemma2.F16"), dir.file("no-post-norm.gguf"), [](GgufWriter&) {},
                                   "blk.1.post_ffw_norm.weight");
  EXPECT_THAT(load_error(path), HasSubstr("missing tensor 'blk.1.post_ffw_norm.weight'"));
}

// Phi-3's LongRoPE factors are chosen by the context the model runs at: the
// short ones up to the original context (4096), the long ones beyond. The
// unused set is accepted (not an unknown tensor), and the choice shows in the logits.
TEST(StrictLoader, PhiLongRopeFactorsFollowTheContext) {
  auto first_logits = [](int64_t n_ctx) {
    LoadOptions o = test::shared_engine("reference/compat/models/phi3.F16.gguf", n_ctx);
    LoadedModel e = LoadedModel::load(o);
    return test::all_logits(e, {1, 429, 416, 291, 264, 317}, 1);
  };
  const auto a = first_logits(512), b = first_logits(4096), c = first_logits(8192);
  EXPECT_EQ(a, b);  // both short
  ASSERT_EQ(a.size(), c.size());
  double diff = 0;
  for (size_t i = 0; i < a.size(); i++) diff = std::max(diff, static_cast<double>(std::fabs(a[i] - c[i])));
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace kestrel
