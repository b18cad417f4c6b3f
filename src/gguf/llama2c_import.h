#pragma once
// Import of Karpathy's llama2.c checkpoints (version 0 "legacy" layout) and
// tokenizer.bin files into GGUF, with llama.cpp's tensor names and metadata
// keys so the result loads in other GGUF readers.
#include <string>

#include "formats/ggml_types.h"
#include "core/mapped_file.h"
#include "gguf/gguf_writer.h"

namespace kestrel {

struct Llama2cOptions {
  GgmlType type = GgmlType::F32;   // 2-D weights; 1-D tensors stay F32
  std::string name = "llama2c";
  // Called for each tensor that cannot be stored in `type` (row length not a
  // multiple of the block size) with the fallback chosen.
  std::function<void(const std::string& tensor, GgmlType fallback)> on_fallback;
};

// The returned writer reads from `checkpoint` while writing: keep it alive.
GgufWriter llama2c_to_gguf(const MappedFile& checkpoint, const MappedFile& tokenizer, const Llama2cOptions& options);

// Whether the file at path starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

}  // namespace kestrel
