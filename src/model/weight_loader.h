#pragma once
// Looks up GGUF tensors by name and checks their shapes, with errors that
// name the file, the tensor and what was expected.
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/weight.h"

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

 private:
  Weight from_info(const GgufTensorInfo& t, const std::vector<int64_t>& ne) const;
  const GgufFile& file_;
};

}  // namespace kestrel
