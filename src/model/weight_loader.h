#pragma once
// Looks up GGUF tensors by name and checks their shapes, with errors that
// name the file, the tensor and what was expected. It also remembers which
// tensors the architecture took: a file tensor that nobody takes is a tensor
// whose math Kestrel would silently leave out, so finish() refuses the file
// (llama.cpp refuses such files too).
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "formats/weight.h"

namespace kestrel {

class WeightLoader {
 public:
  explicit WeightLoader(const GgufFile& file) : file_(file) {}

  // Shape given as ne (row length first). Throws if missing or mis-shaped.
  Weight require(const std::string& name, const std::vector<int64_t>& ne) const;
  Weight optional(const std::string& name, const std::vector<int64_t>& ne) const;
  // A 1-D tensor dequantized to float (norm weights, biases).
  std::vector<float> require_vector(const std::string& name, int64_t n) const;
  std::vector<float> optional_vector(const std::string& name, int64_t n) const;
  // The same for a tensor of any shape (gpt-oss's per-expert biases, [n_expert][width]), its floats in order.
  std::vector<float> optional_floats(const std::string& name, const std::vector<int64_t>& ne) const;
  // An I32 tensor of this shape, its values (DeepSeek-V4's per-token expert table).
  std::vector<int32_t> require_i32(const std::string& name, const std::vector<int64_t>& ne) const;
  bool has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
  // Marks a tensor present in the file as deliberately unused (e.g. an MTP
  // block that was not asked for, or the long LongRoPE factors at a short
  // context); `why` is for the reader of the code.
  void skip(const std::string& name, const char* why) const;
  // Every tensor whose name starts with prefix (another pipeline stage's layer).
  void skip_prefix(const std::string& prefix, const char* why) const;
  // Throws naming the first file tensor that was neither taken nor skipped.
  void finish(const std::string& arch) const;

 private:
  Weight from_info(const GgufTensorInfo& t, const std::vector<int64_t>& ne) const;
  const GgufFile& file_;
  mutable std::set<std::string> used_;
};

}  // namespace kestrel
