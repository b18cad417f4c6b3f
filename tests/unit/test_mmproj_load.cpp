// mmproj files are loaded strictly (mmproj/mmproj.h): every way a projector file can be wrong for Kestrel is a
// load error that names the file and what is wrong — a key or tensor the projector does not consume, another
// model's width, a text model the projector does not feed, an encoder Kestrel does not run, not an mmproj at all.
#include <gtest/gtest.h>

#include <functional>

#include "backend/backend.h"
#include "gguf/gguf_writer.h"
#include "mmproj/mmproj.h"
#include "test_support.h"

namespace kestrel {
namespace mmproj_load_test {

// The tiny projector (gemma3 unless named) for a 64-wide text model, copied through edit (keys and tensors whose
// names `drop` accepts left out) to a file of its own; the error loading it for (arch, width), or "" when it loads.
std::string load_error(test::TempDir& dir, const std::function<void(GgufWriter&)>& edit,
                       const std::function<bool(const std::string&)>& drop = nullptr, const std::string& arch = "gemma3",
                       int64_t width = 64, const std::string& projector = "gemma3") {
  const std::string base = dir.file("base.mmproj.gguf"), path = dir.file("edited.mmproj.gguf");
  synth_mmproj(base, projector, 64, 1);
  const GgufFile f = GgufFile::open(base);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata())
    if (!drop || !drop(k)) w.set(k, v);
  for (const auto& t : f.tensors())
    if (!drop || !drop(t.name)) w.add_tensor_bytes(t.name, t.type, t.ne, t.data);
  if (edit) edit(w);
  w.write_file(path);
  auto be = make_cpu_backend(1);
  try {
    const auto m = Mmproj::load(path, *be, arch, width);
    EXPECT_NE(m->vision(), nullptr);
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "the error does not name the file: " << e.what();
    return e.what();
  }
  return "";
}

TEST(MmprojLoad, TheSynthProjectorLoadsAndDescribesItself) {
  test::TempDir dir;
  EXPECT_EQ(load_error(dir, nullptr), "");
  const std::string d = describe_mmproj(dir.file("base.mmproj.gguf"));
  EXPECT_NE(d.find("vision encoder: projector gemma3 (implemented), 2 layers, width 64"), std::string::npos) << d;
  EXPECT_NE(d.find("image 112 px, patch 14"), std::string::npos) << d;
}

TEST(MmprojLoad, AnUnconsumedKeyOrTensorIsALoadErrorNamingIt) {
  test::TempDir dir;
  const std::string key = load_error(dir, [](GgufWriter& w) { w.set_u32("clip.vision.window_size", 8); });
  EXPECT_NE(key.find("clip.vision.window_size"), std::string::npos) << key;
  const std::string tensor = load_error(dir, [](GgufWriter& w) {
    const float x[64] = {};
    w.add_tensor_bytes("v.pre_ln.weight", GgmlType::F32, {64}, x);
  });
  EXPECT_NE(tensor.find("v.pre_ln.weight"), std::string::npos) << tensor;
}

TEST(MmprojLoad, AMissingTensorOrKeyIsNamed) {
  test::TempDir dir;
  const std::string t = load_error(dir, nullptr, [](const std::string& n) { return n == "v.blk.1.attn_k.bias"; });
  EXPECT_NE(t.find("v.blk.1.attn_k.bias"), std::string::npos) << t;
  const std::string k = load_error(dir, nullptr, [](const std::string& n) { return n == "clip.vision.image_std"; });
  EXPECT_NE(k.find("clip.vision.image_std"), std::string::npos) << k;
  const std::string gelu = load_error(dir, nullptr, [](const std::string& n) { return n == "clip.use_gelu"; });
  EXPECT_NE(gelu.find("clip.use_gelu"), std::string::npos) << gelu;
}

TEST(MmprojLoad, AnotherModelsWidthOrFamilyIsRefused) {
  test::TempDir dir;
  const std::string width = load_error(dir, nullptr, nullptr, "gemma3", 128);
  EXPECT_NE(width.find("64 wide but the text model's input is 128 wide"), std::string::npos) << width;
  const std::string arch = load_error(dir, nullptr, nullptr, "llama", 64);
  EXPECT_NE(arch.find("feeds gemma3 text models, not llama"), std::string::npos) << arch;
  const std::string dim = load_error(dir, [](GgufWriter& w) { w.set_u32("clip.vision.projection_dim", 32); });
  EXPECT_NE(dim.find("clip.vision.projection_dim"), std::string::npos) << dim;
}

TEST(MmprojLoad, EncodersAndProjectorsKestrelDoesNotRunAreNamed) {
  test::TempDir dir;
  const std::string audio = load_error(dir, [](GgufWriter& w) { w.set_bool("clip.has_audio_encoder", true); });
  EXPECT_NE(audio.find("clip.has_audio_encoder"), std::string::npos) << audio;
  const std::string type = load_error(dir, [](GgufWriter& w) { w.set_str("clip.projector_type", "pixtral"); });
  EXPECT_NE(type.find("'pixtral' is not implemented (Kestrel runs: gemma3, qwen3vl_merger)"), std::string::npos) << type;
  // A projector Kestrel runs, for another text family: named with the families it feeds.
  const std::string family = load_error(dir, [](GgufWriter& w) { w.set_str("clip.projector_type", "qwen3vl_merger"); });
  EXPECT_NE(family.find("a qwen3vl_merger projector feeds qwen35 or qwen35moe text models, not gemma3"), std::string::npos)
      << family;
  const std::string text = load_error(dir, [](GgufWriter& w) { w.set_str("general.architecture", "gemma3"); });
  EXPECT_NE(text.find("not an mmproj file"), std::string::npos) << text;
}

// Qwen3-VL's tower (Qwen3.5's mmproj files): loads for qwen35 and qwen35moe; what Kestrel does not run is named.
TEST(MmprojLoad, Qwen3VlMergerLoadsForQwen35AndNamesWhatItDoesNotRun) {
  test::TempDir dir;
  auto qwen = [&](const std::function<void(GgufWriter&)>& edit, const std::function<bool(const std::string&)>& drop = nullptr,
                  const std::string& arch = "qwen35") { return load_error(dir, edit, drop, arch, 64, "qwen3vl_merger"); };
  EXPECT_EQ(qwen(nullptr), "");
  EXPECT_EQ(qwen(nullptr, nullptr, "qwen35moe"), "");
  const std::string d = describe_mmproj(dir.file("base.mmproj.gguf"));
  EXPECT_NE(d.find("projector qwen3vl_merger (implemented), 2 layers, width 64"), std::string::npos) << d;
  const std::string deep = qwen([](GgufWriter& w) {
    w.set("clip.vision.is_deepstack_layers", GgufValue::array(GgufValueType::BOOL, {GgufValue::boolean(true), GgufValue::boolean(false)}));
  });
  EXPECT_NE(deep.find("deepstack"), std::string::npos) << deep;
  const std::string merge = qwen([](GgufWriter& w) { w.set_u32("clip.vision.spatial_merge_size", 3); });
  EXPECT_NE(merge.find("clip.vision.spatial_merge_size"), std::string::npos) << merge;
  const std::string second = qwen(nullptr, [](const std::string& n) { return n == "v.patch_embd.weight.1"; });
  EXPECT_NE(second.find("v.patch_embd.weight.1"), std::string::npos) << second;
  const std::string size = qwen([](GgufWriter& w) { w.set_u32("clip.vision.image_size", 96); });
  EXPECT_NE(size.find("clip.vision.image_size"), std::string::npos) << size;
  const std::string split = qwen([](GgufWriter& w) { w.set_u32("clip.vision.attention.head_count", 5); });
  EXPECT_NE(split.find("clip.vision.attention.head_count"), std::string::npos) << split;  // 64 / 5: no heads
  const std::string llama = qwen(nullptr, nullptr, "llama");
  EXPECT_NE(llama.find("feeds qwen35 or qwen35moe text models, not llama"), std::string::npos) << llama;
}

}  // namespace mmproj_load_test
}  // namespace kestrel
