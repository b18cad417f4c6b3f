// Runs the fuzz target over files (a regression corpus) without libFuzzer, so
// the g++ build exercises it too; --write-seeds DIR writes small seed GGUFs.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void write_seeds(const std::string& dir) {
  using namespace kestrel;
  std::filesystem::create_directories(dir);
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 8);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.attention.head_count", 2);
  w.set_u32("llama.feed_forward_length", 16);
  w.set_u32("llama.attention.head_count_kv", 1);
  w.set_u32("llama.context_length", 64);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_str("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "<0x41>", "\xE2\x96\x81H", "ello"}));
  w.set("tokenizer.ggml.scores", GgufValue::floats({0, 0, 0, 0, -1, -2}));
  w.set("tokenizer.ggml.token_type", GgufValue::int32s({2, 3, 3, 6, 1, 1}));
  const float x[64] = {};
  w.add_tensor_bytes("token_embd.weight", GgmlType::F32, {8, 6}, x);
  w.add_tensor_bytes("blk.0.attn_norm.weight", GgmlType::F32, {8}, x);
  w.write_file(dir + "/spm.gguf");
  GgufWriter b;
  b.set_str("tokenizer.ggml.model", "gpt2");
  b.set_str("tokenizer.ggml.pre", "qwen2");
  b.set("tokenizer.ggml.tokens", GgufValue::strings({"H", "e", "l", "o", "He", "ll", "Hell"}));
  b.set("tokenizer.ggml.merges", GgufValue::strings({"H e", "l l", "He ll"}));
  b.set("nested", GgufValue::array(GgufValueType::ARRAY, {GgufValue::int32s({1}), GgufValue::strings({"x"})}));
  b.write_file(dir + "/bpe.gguf");
  // One tensor of every quantized type, for the fuzzer to mutate type ids and shapes around.
  GgufWriter q;
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                            GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                            GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::IQ2_XXS,
                            GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
                            GgmlType::IQ1_M};
  for (GgmlType t : types) {
    const int64_t n = traits(t).block_size;
    q.add_tensor(std::string("w.") + std::string(type_name(t)), t, {n}, [](uint8_t* d, size_t size) { std::memset(d, 0x11, size); });
  }
  q.write_file(dir + "/types.gguf");
}

int replay(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  // Also every prefix of small inputs, the cheapest way to reach each error path.
  if (bytes.size() <= 4096)
    for (size_t n = 0; n < bytes.size(); n++) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), n);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
    write_seeds(argv[2]);
    return 0;
  }
  int files = 0;
  for (int i = 1; i < argc; i++) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files += replay(e.path().string());
    } else {
      files += replay(p.string());
    }
  }
  std::printf("replayed %d files without a crash\n", files);
  return files > 0 ? 0 : 1;
}
