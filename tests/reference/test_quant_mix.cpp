// llama-quantize's mixes: for every quantized file of the compat reference
// set (llama32 in 12 mixes, qwen25 in 6, written by llama-quantize), the
// type we choose for each tensor of the same model equals the type
// llama-quantize chose (the set's manifest), fallbacks for 320-wide rows
// included; and `kestrel quantize --mix` writes exactly that table. The
// IQ1-IQ3 mixes (no llama.cpp files of them in the set) follow the rules
// as read from llama.cpp's source, and need an importance matrix.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gguf/gguf.h"
#include "quant/quant_mix.h"
#include "test_support.h"

namespace kestrel {
namespace {

const std::string kModels = "reference/compat/models/";

TEST(QuantMix, EveryTensorTypeOfTheCompatSetMatchesLlamaQuantize) {
  const auto manifest = test::read_json(test::shared(kModels + "manifest.json"));
  int files = 0, tensors = 0;
  for (const auto& [file, entry] : manifest.items()) {
    const auto dot = file.find('.');
    const std::string family = file.substr(0, dot), mix_name = file.substr(dot + 1, file.size() - dot - 6);
    if (mix_name == "F16") continue;
    const auto mix = find_quant_mix(mix_name);
    ASSERT_TRUE(mix) << mix_name;
    EXPECT_EQ(mix->ftype, entry["file_type"].get<uint32_t>()) << file;
    const GgufFile src = GgufFile::open(test::shared(kModels + family + ".F16.gguf"));
    const auto plan = plan_quant_mix(src, *mix, {});
    for (const auto& [tensor, type] : entry["tensors"].items()) {
      ASSERT_TRUE(plan.count(tensor)) << file << " " << tensor;
      EXPECT_EQ(type_name(plan.at(tensor)), type.get<std::string>()) << file << " " << tensor;
      tensors++;
    }
    EXPECT_EQ(plan.size(), entry["tensors"].size()) << file;
    files++;
  }
  EXPECT_GE(files, 18);
  EXPECT_GT(tensors, 400);
}

TEST(QuantMix, CliWritesTheTableAndFileType) {
  test::TempDir dir;
  const auto manifest = test::read_json(test::shared(kModels + "manifest.json"));
  for (const char* mix : {"Q3_K_M", "IQ4_XS"}) {
    const std::string out = dir.file(std::string(mix) + ".gguf");
    const std::string cmd = std::string(KESTREL_BINARY) + " quantize " + test::shared(kModels + "llama32.F16.gguf") +
                            " " + out + " --mix " + mix + " -t 2 > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const GgufFile q = GgufFile::open(out);
    const auto& want = manifest[std::string("llama32.") + mix + ".gguf"];
    EXPECT_EQ(q.get_int("general.file_type"), want["file_type"].get<int64_t>());
    for (const auto& t : q.tensors()) EXPECT_EQ(type_name(t.type), want["tensors"][t.name].get<std::string>()) << t.name;
  }
}

TEST(QuantMix, NamesAndRefusals) {
  EXPECT_EQ(find_quant_mix("q4_k_m")->base, GgmlType::Q4_K);
  EXPECT_FALSE(find_quant_mix("q4_k_x"));
  // llama-quantize refuses the lowest-bit lattice mixes without an importance matrix.
  const GgufFile src = GgufFile::open(test::shared(kModels + "llama32.F16.gguf"));
  for (const char* mix : {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XXS", "Q2_K_S"}) {
    try {
      plan_quant_mix(src, *find_quant_mix(mix), {});
      ADD_FAILURE() << mix << " planned without an importance matrix";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("importance matrix"), std::string::npos) << e.what();
    }
  }
}

TEST(QuantMix, LatticeMixesFollowLlamaCppsRules) {
  // llama32: 3 layers, GQA 4:1, tied embeddings, 256-wide rows (ffn_down 512).
  // By llama_tensor_get_type: the tied head is Q5_K in every IQ1-IQ3 mix;
  // attn_v is Q4_K once GQA >= 4; IQ1's attn_output is IQ2_XXS; IQ2_S/IQ2_M
  // raise attn_output to IQ3_S; IQ3_XXS raises attn_v to Q4_K too.
  const GgufFile src = GgufFile::open(test::shared(kModels + "llama32.F16.gguf"));
  QuantMixOptions with_imatrix;
  with_imatrix.has_imatrix = true;
  struct Want {
    const char* mix;
    const char *head, *attn_v, *attn_output, *ffn_up;
  };
  for (const Want& w : {Want{"IQ2_XXS", "Q5_K", "Q4_K", "IQ2_XXS", "IQ2_XXS"}, Want{"IQ2_XS", "Q5_K", "Q4_K", "IQ2_XS", "IQ2_XS"},
                        Want{"IQ2_M", "Q5_K", "Q4_K", "IQ3_S", "IQ2_S"}, Want{"IQ1_S", "Q5_K", "Q4_K", "IQ2_XXS", "IQ1_S"},
                        Want{"IQ1_M", "Q5_K", "Q4_K", "IQ2_XXS", "IQ1_M"}}) {
    const auto plan = plan_quant_mix(src, *find_quant_mix(w.mix), with_imatrix);
    EXPECT_EQ(type_name(plan.at("token_embd.weight")), w.head) << w.mix;
    EXPECT_EQ(type_name(plan.at("blk.1.attn_v.weight")), w.attn_v) << w.mix;
    EXPECT_EQ(type_name(plan.at("blk.1.attn_output.weight")), w.attn_output) << w.mix;
    EXPECT_EQ(type_name(plan.at("blk.2.ffn_up.weight")), w.ffn_up) << w.mix;
    EXPECT_EQ(plan.at("blk.0.attn_norm.weight"), GgmlType::F32) << w.mix;
  }
}

}  // namespace
}  // namespace kestrel
