// Where the weights live after loading: when the backend repacks most of a
// file's weight bytes, LoadedModel::load maps the file (its copy is read once by
// the packer, as reclaimable page cache) instead of copying it into huge
// pages that would sit unused beside the repacked copy. MoE files count
// their expert stacks: a DeepSeek-V2-Lite-shaped model loaded its 1.3 GB file
// into anonymous memory beside 1.1 GB of repacked experts before.
#include <gtest/gtest.h>

#include "core/mapped_file.h"
#include "model/synth.h"
#include "runtime/loaded_model.h"

namespace kestrel {
namespace {

bool mostly_repacked_synth(const std::string& arch, GgmlType type) {
  SynthOptions s;
  s.shape = synth_preset(arch, "tiny");
  s.type = type;
  return mostly_repacked(GgufFile::parse(MappedFile::from_buffer(synth_model(s).write_buffer(), arch)));
}

TEST(WeightResidence, RepackedMatricesAndExpertStacksCount) {
  EXPECT_TRUE(mostly_repacked_synth("llama", GgmlType::Q8_0));      // matrices
  EXPECT_TRUE(mostly_repacked_synth("qwen3moe", GgmlType::Q8_0));   // most bytes in ffn_*_exps stacks
  EXPECT_TRUE(mostly_repacked_synth("deepseek2", GgmlType::Q4_0));  // routed and shared experts, MLA
  EXPECT_FALSE(mostly_repacked_synth("llama", GgmlType::F32));      // the kernels read F32 as it is
  EXPECT_FALSE(mostly_repacked_synth("qwen3moe", GgmlType::F16));
}

}  // namespace
}  // namespace kestrel
