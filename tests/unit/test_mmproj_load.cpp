// mmproj files are loaded strictly (mmproj/mmproj.h): every way a projector file can be wrong for Kestrel is a
// load error that names the file and what is wrong — a key or tensor the projector does not consume, another
// model's width, a text model the projector does not feed, an encoder Kestrel does not run, not an mmproj at all.
#include <fmt/format.h>
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
    EXPECT_TRUE(m->vision() || m->audio());
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
  const std::string audio = load_error(dir, [](GgufWriter& w) {
    w.set_bool("clip.has_audio_encoder", true);
    w.set_bool("clip.has_vision_encoder", false);
  });
  EXPECT_NE(audio.find("clip.has_audio_encoder"), std::string::npos) << audio;
  // Beside a vision encoder, an audio encoder Kestrel does not run (Gemma 4's encoder-free gemma4ua) is set aside:
  // its keys and tensors (a.*, mm.a.*) load, and the file says it is not run.
  const float x[64] = {};
  EXPECT_EQ(load_error(dir, [&](GgufWriter& w) {
              w.set_bool("clip.has_audio_encoder", true);
              w.set_str("clip.audio.projector_type", "gemma4ua");
              w.set_u32("clip.audio.block_count", 2);
              w.add_tensor_bytes("a.blk.0.attn_q.weight", GgmlType::F32, {8, 8}, x);
              w.add_tensor_bytes("mm.a.input_projection.weight", GgmlType::F32, {8, 8}, x);
            }),
            "");
  {
    auto be = make_cpu_backend(1);
    const auto m = Mmproj::load(dir.file("edited.mmproj.gguf"), *be, "gemma3", 64);
    EXPECT_EQ(m->audio_not_run(), "gemma4ua");
  }
  // A stray audio tensor in a vision-only file is still a load error naming it.
  const std::string stray = load_error(dir, [&](GgufWriter& w) { w.add_tensor_bytes("a.blk.0.attn_q.weight", GgmlType::F32, {8, 8}, x); });
  EXPECT_NE(stray.find("a.blk.0.attn_q.weight"), std::string::npos) << stray;
  const std::string type = load_error(dir, [](GgufWriter& w) { w.set_str("clip.projector_type", "llama4"); });
  EXPECT_NE(type.find("'llama4' is not implemented (Kestrel runs: gemma3, qwen3vl_merger, gemma4v, pixtral, ultravox, voxtral, "
                      "qwen2a, gemma4a)"),
            std::string::npos)
      << type;
  // A projector Kestrel runs, for another text family: named with the families it feeds.
  const std::string family = load_error(dir, [](GgufWriter& w) { w.set_str("clip.projector_type", "qwen3vl_merger"); });
  EXPECT_NE(family.find("a qwen3vl_merger projector feeds qwen35 or qwen35moe text models, not gemma3"), std::string::npos)
      << family;
  const std::string text = load_error(dir, [](GgufWriter& w) { w.set_str("general.architecture", "gemma3"); });
  EXPECT_NE(text.find("not an mmproj file"), std::string::npos) << text;
}

// Whisper's audio encoder (Ultravox, Voxtral with llama; Qwen2-Audio with qwen2): loads, describes itself, and
// names what is wrong: the stack factor missing or where it is not used, another family, a missing tensor, a width
// whose GGML_PAD stacking llama.cpp's count disagrees with (llama.cpp refuses those files too, at encode time).
TEST(MmprojLoad, WhisperAudioEncodersLoadAndNameWhatIsWrong) {
  test::TempDir dir;
  auto audio = [&](const std::string& projector, const std::function<void(GgufWriter&)>& edit,
                   const std::function<bool(const std::string&)>& drop = nullptr, const std::string& arch = "llama") {
    return load_error(dir, edit, drop, arch, 64, projector);
  };
  EXPECT_EQ(audio("ultravox", nullptr), "");
  {
    auto be = make_cpu_backend(1);
    const auto m = Mmproj::load(dir.file("edited.mmproj.gguf"), *be, "llama", 64);
    ASSERT_NE(m->audio(), nullptr);
    EXPECT_EQ(m->vision(), nullptr);
    EXPECT_EQ(m->projector(), "ultravox");
    EXPECT_EQ(m->audio()->sample_rate(), 16000);
    EXPECT_EQ(m->audio()->n_tokens(16000), 187) << "one 30 s window: 3000 frames, stacked by 8, halved";
    EXPECT_EQ(m->audio()->n_tokens(16000 * 45), 2 * 187) << "45 s: two windows (the padding's partial one dropped)";
    EXPECT_EQ(m->audio()->placement().before, "");
    const std::string d = describe_mmproj(dir.file("edited.mmproj.gguf"));
    EXPECT_NE(d.find("audio encoder: projector ultravox (implemented), 2 layers, width 80"), std::string::npos) << d;
  }
  EXPECT_EQ(audio("voxtral", nullptr), "");
  EXPECT_EQ(audio("qwen2a", nullptr, nullptr, "qwen2"), "");
  {
    auto be = make_cpu_backend(1);
    const auto m = Mmproj::load(dir.file("edited.mmproj.gguf"), *be, "qwen2", 64);
    EXPECT_EQ(m->audio()->n_tokens(16000), 750);
    EXPECT_EQ(m->audio()->placement().before, "<|audio_bos|>");
    EXPECT_EQ(m->audio()->placement().after, "<|audio_eos|>");
  }
  const std::string stack = audio("ultravox", nullptr, [](const std::string& n) { return n == "clip.audio.projector.stack_factor"; });
  EXPECT_NE(stack.find("clip.audio.projector.stack_factor"), std::string::npos) << stack;
  const std::string unused = audio("qwen2a", [](GgufWriter& w) { w.set_u32("clip.audio.projector.stack_factor", 4); },
                                   nullptr, "qwen2");
  EXPECT_NE(unused.find("not used by a qwen2a projector"), std::string::npos) << unused;
  const std::string family = audio("qwen2a", nullptr);
  EXPECT_NE(family.find("a qwen2a projector feeds qwen2 text models, not llama"), std::string::npos) << family;
  const std::string k_bias = audio("voxtral", [](GgufWriter& w) {
    const float x[80] = {};
    w.add_tensor_bytes("a.blk.0.attn_k.bias", GgmlType::F32, {80}, x);
  });
  EXPECT_NE(k_bias.find("a.blk.0.attn_k.bias"), std::string::npos) << "Whisper's k has no bias: " << k_bias;
  const std::string conv = audio("ultravox", nullptr, [](const std::string& n) { return n == "a.conv1d.2.bias"; });
  EXPECT_NE(conv.find("a.conv1d.2.bias"), std::string::npos) << conv;
  const std::string mel = audio("ultravox", nullptr, [](const std::string& n) { return n == "clip.audio.num_mel_bins"; });
  EXPECT_NE(mel.find("clip.audio.num_mel_bins"), std::string::npos) << mel;
  // A vision projector named as the audio encoder's.
  const std::string vis = audio("ultravox", [](GgufWriter& w) { w.set_str("clip.projector_type", "gemma3"); });
  EXPECT_NE(vis.find("Kestrel runs no audio encoder of projector type 'gemma3' (audio: ultravox, voxtral, qwen2a, gemma4a)"),
            std::string::npos)
      << vis;
}

// Gemma 4's audio Conformer (gemma4a): alone or beside gemma4v in one file (as the released E2B/E4B files); its
// token count per 30-second chunk; what it does not consume, and a chunk too short for a frame, named.
TEST(MmprojLoad, Gemma4AudioLoadsAloneOrBesideVisionAndNamesWhatIsWrong) {
  test::TempDir dir;
  auto g4a = [&](const std::function<void(GgufWriter&)>& edit, const std::function<bool(const std::string&)>& drop = nullptr,
                 const std::string& projector = "gemma4a") { return load_error(dir, edit, drop, "gemma4", 64, projector); };
  EXPECT_EQ(g4a(nullptr), "");
  {
    auto be = make_cpu_backend(1);
    const auto m = Mmproj::load(dir.file("edited.mmproj.gguf"), *be, "gemma4", 64);
    ASSERT_NE(m->audio(), nullptr);
    EXPECT_EQ(m->vision(), nullptr);
    EXPECT_EQ(m->projector(), "gemma4a");
    // 30 s: 2999 frames, halved twice (750); 45 s: that and 15 s (1499 frames: 375); chunks are not padded.
    EXPECT_EQ(m->audio()->n_tokens(16000 * 30), 750);
    EXPECT_EQ(m->audio()->n_tokens(16000 * 45), 750 + 375);
    EXPECT_EQ(m->audio()->n_tokens(1000), 2) << "1000 samples: 6 frames";
    EXPECT_EQ(m->audio()->placement().before, "<|audio>");
    EXPECT_EQ(m->audio()->placement().after, "<audio|>");
    EXPECT_FALSE(m->audio()->placement().non_causal);
    // 30 s and one sample: the second chunk has no frame; refused by name, as llama.cpp refuses it.
    try {
      m->audio()->n_tokens(16000 * 30 + 1);
      ADD_FAILURE() << "a one-sample chunk was counted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("chunk of 1 sample is too short"), std::string::npos) << e.what();
    }
    EXPECT_NE(m->audio()->describe().find("gemma4a (Gemma 4 Conformer): 2 layers, 64 wide, 4 heads, FFN 256, 128 mel "
                                          "bins, subsampled by 4 (8 and 4 channels), 750 tokens of 64 per 30 s"),
              std::string::npos)
        << m->audio()->describe();
  }
  EXPECT_EQ(g4a(nullptr, nullptr, "gemma4v+gemma4a"), "");
  {
    auto be = make_cpu_backend(1);
    const auto m = Mmproj::load(dir.file("edited.mmproj.gguf"), *be, "gemma4", 64);
    ASSERT_NE(m->audio(), nullptr);
    ASSERT_NE(m->vision(), nullptr);
    EXPECT_EQ(m->projector(), "gemma4v");
    EXPECT_EQ(m->audio_not_run(), "");
  }
  // A bias the graph does not add, a missing module tensor, a kernel that is not 3x3: named.
  const std::string bias = g4a([](GgufWriter& w) {
    const float x[256] = {};
    w.add_tensor_bytes("a.blk.1.ffn_up.bias", GgmlType::F32, {256}, x);
  });
  EXPECT_NE(bias.find("a.blk.1.ffn_up.bias"), std::string::npos) << bias;
  const std::string dw = g4a(nullptr, [](const std::string& n) { return n == "a.blk.0.conv_dw.weight"; });
  EXPECT_NE(dw.find("a.blk.0.conv_dw.weight"), std::string::npos) << dw;
  const std::string kernel = g4a(
      [](GgufWriter& w) {
        const float x[5 * 5 * 8] = {};
        w.add_tensor_bytes("a.conv1d.0.weight", GgmlType::F32, {5, 5, 1, 8}, x);
      },
      [](const std::string& n) { return n == "a.conv1d.0.weight"; });
  EXPECT_NE(kernel.find("'a.conv1d.0.weight' must be a 3x3 convolution"), std::string::npos) << kernel;
  const std::string family = load_error(dir, nullptr, nullptr, "llama", 64, "gemma4a");
  EXPECT_NE(family.find("a gemma4a projector feeds gemma4 text models, not llama"), std::string::npos) << family;
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

// Gemma 4's tower: loads for gemma4 text models; its images are attended both ways except with E2B and E4B (text
// widths 1536 and 2560: causal, as llama.cpp's mtmd_decode_use_non_causal says); what is wrong is named.
TEST(MmprojLoad, Gemma4vLoadsAndIsCausalForE2bAndE4b) {
  test::TempDir dir;
  auto g4 = [&](const std::function<void(GgufWriter&)>& edit, const std::function<bool(const std::string&)>& drop = nullptr) {
    return load_error(dir, edit, drop, "gemma4", 64, "gemma4v");
  };
  EXPECT_EQ(g4(nullptr), "");
  auto be = make_cpu_backend(1);
  for (const int64_t width : {64, 1536, 2560}) {
    const std::string path = dir.file(fmt::format("g4-{}.mmproj.gguf", width));
    synth_mmproj(path, "gemma4v", width, 1);
    const auto m = Mmproj::load(path, *be, "gemma4", width);
    const MediaPlacement p = m->vision()->placement();
    EXPECT_EQ(p.before, "<|image>");
    EXPECT_EQ(p.after, "<image|>");
    EXPECT_EQ(p.non_causal, width == 64) << width;
    EXPECT_EQ(m->vision()->n_tokens(640, 480), 27 * 20) << "640x480 at 24 px a token: 648x480 (640 / 24 rounds up)";
  }
  const std::string bias = g4(nullptr, [](const std::string& n) { return n == "v.std_scale"; });
  EXPECT_EQ(bias, "");  // (the synth writes neither: both absent is fine)
  const std::string half = g4([](GgufWriter& w) {
    const float x[64] = {};
    w.add_tensor_bytes("v.std_bias", GgmlType::F32, {64}, x);
  });
  EXPECT_NE(half.find("v.std_bias and v.std_scale"), std::string::npos) << half;
  const std::string silu = g4([](GgufWriter& w) { w.set_bool("clip.use_silu", true); });
  EXPECT_NE(silu.find("clip.use_silu"), std::string::npos) << silu;
  const std::string qwen = load_error(dir, nullptr, nullptr, "qwen35", 64, "gemma4v");
  EXPECT_NE(qwen.find("feeds gemma4 text models, not qwen35"), std::string::npos) << qwen;
}

// Pixtral's tower: loads for mistral3, llama and mistral4 text models; a merge size without its merger, or a file without the
// [IMG_BREAK] row, is named; its token count is the merged grid plus a break a row but the last.
TEST(MmprojLoad, PixtralLoadsAndCountsItsRowBreaks) {
  test::TempDir dir;
  auto px = [&](const std::function<void(GgufWriter&)>& edit, const std::function<bool(const std::string&)>& drop = nullptr,
                const std::string& arch = "mistral3") { return load_error(dir, edit, drop, arch, 64, "pixtral"); };
  EXPECT_EQ(px(nullptr), "");
  EXPECT_EQ(px(nullptr, nullptr, "llama"), "");
  {
    auto be = make_cpu_backend(1);
    const auto m = Mmproj::load(dir.file("edited.mmproj.gguf"), *be, "llama", 64);
    EXPECT_EQ(m->vision()->placement().after, "[IMG_END]");
    EXPECT_FALSE(m->vision()->placement().non_causal);
    // 97x61 at 16 px a token (patch 8, merge 2): 96x64, a 6x4 grid, and 3 breaks.
    EXPECT_EQ(m->vision()->n_tokens(97, 61), 6 * 4 + 3);
  }
  const std::string merger = px(nullptr, [](const std::string& n) { return n == "mm.patch_merger.weight"; });
  EXPECT_NE(merger.find("mm.patch_merger.weight"), std::string::npos) << merger;
  const std::string brk = px(nullptr, [](const std::string& n) { return n == "v.token_embd.img_break"; });
  EXPECT_NE(brk.find("v.token_embd.img_break"), std::string::npos) << brk;
  const std::string gemma = px(nullptr, nullptr, "gemma3");
  EXPECT_NE(gemma.find("feeds mistral3 or llama or mistral4 text models, not gemma3"), std::string::npos) << gemma;
}

}  // namespace mmproj_load_test
}  // namespace kestrel
