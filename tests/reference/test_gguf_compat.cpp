// Our GGUF files against one written by llama.cpp's own converter from the
// same llama2.c checkpoint (../shared/models/stories260K.gguf): same keys,
// same tensor names, shapes and types, same bytes.
#include "gguf/gguf.h"
#include "gguf/llama2c_import.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {
namespace {

TEST(GgufCompat, ConvertedStoriesMatchesLlamaCppsConversion) {
  const GgufFile theirs = GgufFile::open(test::shared("models/stories260K.gguf"));
  const MappedFile ckpt = MappedFile::open(test::shared("models/stories260K.bin"));
  const MappedFile tok = MappedFile::open(test::shared("models/tok512.bin"));
  const GgufFile ours = GgufFile::parse(MappedFile::from_buffer(llama2c_to_gguf(ckpt, tok, {}).write_buffer(), "ours"));

  // Every model key llama.cpp wrote, we write with the same value (context_length aside:
  // llama.cpp's converter writes 128, we write the checkpoint's 512).
  for (const auto& [key, value] : theirs.metadata()) {
    if (key == "general.name" || key == "tokenizer.ggml.seperator_token_id" || key == "tokenizer.ggml.padding_token_id")
      continue;  // name is free text; -1 ids mean "none" and we leave them out
    SCOPED_TRACE(key);
    const GgufValue* mine = ours.find(key);
    ASSERT_NE(mine, nullptr) << "missing key";
    if (key == "llama.context_length") {
      EXPECT_EQ(mine->as_int(), 512);
    } else if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.scores" || key == "tokenizer.ggml.token_type") {
      const auto& a = value.as_array().items;
      const auto& b = mine->as_array().items;
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(a[i].to_display(), b[i].to_display()) << "item " << i;
    } else {
      EXPECT_EQ(value.to_display(), mine->to_display());
    }
  }
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const auto& t : theirs.tensors()) {
    SCOPED_TRACE(t.name);
    const GgufTensorInfo* m = ours.find_tensor(t.name);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->ne, t.ne);
    EXPECT_EQ(m->type, t.type);
    ASSERT_EQ(m->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(m->data, t.data, t.nbytes), 0);
  }
}

TEST(GgufCompat, TiedOutputHeadUsesTheEmbedding) {
  // The same model without output.weight (as tied-embedding GGUFs are written)
  // gives the same logits, because stories260K's classifier is the embedding.
  const GgufFile full = GgufFile::open(test::shared("models/stories260K.gguf"));
  GgufWriter w;
  for (const auto& [k, v] : full.metadata()) w.set(k, v);
  for (const auto& t : full.tensors())
    if (t.name != "output.weight") w.add_tensor_bytes(t.name, t.type, t.ne, t.data);
  test::TempDir dir;
  w.write_file(dir.file("tied.gguf"));

  auto logits_of = [](const std::string& path) {
    LoadOptions o;
    o.model_path = path;
    LoadedModel e = LoadedModel::load(o);
    EXPECT_EQ(e.model->config().tied_output, path.find("tied") != std::string::npos);
    return test::all_logits(e, {1, 403, 407, 261, 378}, 8);
  };
  const auto a = logits_of(test::shared("models/stories260K.gguf"));
  const auto b = logits_of(dir.file("tied.gguf"));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace kestrel
