#pragma once
// The architectures Kestrel runs: one entry per GGUF `general.architecture`,
// each written in one file under model/arch/ (like llama.cpp's
// models/<arch>.cpp) that holds its hyperparameters, its tensors, its layer
// and its synth shapes. Nothing outside model/arch/ compares architecture
// names: it asks this table.
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "backend/backend.h"
#include "model/hparams_reader.h"
#include "model/layer_recipe.h"
#include "model/model.h"
#include "model/synth.h"

namespace kestrel {

struct Family {
  const char* name;    // general.architecture
  const char* models;  // the released models it covers (for `kestrel info` and the docs)
  LayerRecipe recipe;
  // Its `{arch}.*` keys into a validated config (the reader refuses keys nobody read).
  ModelConfig (*read)(HparamReader& h, const ModelOptions& o);
  // The model over the file's tensors (every one taken, or a load error naming the rest).
  std::unique_ptr<Model> (*make)(const GgufFile& f, Backend& be, const ModelOptions& o, ModelConfig c);
  // Its own keys and layer tensors in a synthetic file.
  void (*synth)(SynthFile& out);
  // Its synth shapes: "tiny" first, then released models'.
  std::vector<SynthPreset> (*presets)();
  // Quantization: whether AWQ may fold its scales into the layer's norms and
  // matrices (a pre-norm layer with separate q/k/v and gate/up and no head
  // norms), and the block count llama.cpp calls a "70B" model, whose attn_v
  // llama-quantize's mixes raise further (0: none of this family).
  bool awq_folds = false;
  int quant_70b_layers = 0;
  // The most multi-token-prediction blocks synth writes for a GQA family (glm4moe: 1; the MLA and DeepSeek-V4
  // families' limits follow from their attention).
  int max_mtp = 0;
  // Splits a synthetic file's MTP block into a file of its own, as the family's converter publishes it
  // (DeepSeek-V4's `mtp-*.gguf`; synth --mtp-file); null: the family keeps the block in the model file.
  void (*split_mtp)(const std::string& path, const std::string& mtp_path) = nullptr;
  // Sets one of the family's own synth options (synth's --shared-kv: "shared_kv") in a shape of its own;
  // false when it has no option of that name. Null: none.
  bool (*synth_option)(SynthShape& s, const std::string& option, int64_t value) = nullptr;
  // Whether a reranker of the family may carry a classification head (cls.output: Qwen3-Reranker's).
  bool classifier_head = false;
};

// Every family, in the order `kestrel info` lists them.
const std::vector<const Family*>& families();
// The family of an architecture name, or null.
const Family* find_family(const std::string& arch);
// ...or an Error listing the supported ones.
const Family& family_of(const std::string& arch);

}  // namespace kestrel
