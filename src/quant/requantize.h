#pragma once
// A GGUF file rewritten with its matrices in another type: metadata copied
// (general.file_type updated), 1-D tensors kept F32, rows that do not divide
// into the type's blocks kept in a narrower fallback type (and reported).
// Methods: round to nearest per block (rtn); AWQ scaling from calibration
// statistics before rounding (awq.h); GPTQ rounding with error compensation
// (gptq.h); or both, AWQ first. Every tensor is produced when the file is
// written, one at a time.
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "formats/ggml_types.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "quant/imatrix.h"
#include "quant/calibration.h"

namespace kestrel {

enum class QuantMethod { Rtn, Awq, Gptq, AwqGptq };
const char* quant_method_name(QuantMethod m);

struct RequantizeOptions {
  GgmlType type = GgmlType::Q8_0;
  int n_threads = 1;
  QuantMethod method = QuantMethod::Rtn;
  // Needed by every method but rtn (gptq: collected with hessian = true).
  std::shared_ptr<const CalibrationStats> calib;
  double gptq_damp = 0.01;
  double awq_alpha = -1;  // >= 0: this alpha everywhere instead of the search (tests)
  // Per-tensor types that replace `type` (mixed precision, llama-quantize's
  // mixes); 1-D tensors stay F32.
  std::map<std::string, GgmlType> tensor_types;
  // Per-column importance (kestrel imatrix or llama-imatrix): the fits
  // weigh errors by it, matrix by matrix (expert by expert).
  std::shared_ptr<const ImportanceMatrix> imatrix;
  // general.file_type to write (llama_ftype); 0: the one of `type`.
  uint32_t file_type = 0;
  // Called for each tensor stored in another type than asked (name, type used).
  std::function<void(const std::string&, GgmlType)> on_fallback;
  // Called with one line per decision worth reporting (AWQ's chosen scales).
  std::function<void(const std::string&)> on_report;
  // Called after each tensor is written (tensors done, tensors in all, its name).
  std::function<void(int64_t, int64_t, const std::string&)> on_progress;
};

// Throws Error when a tensor's type cannot be read, the target cannot be
// written, or a method's calibration statistics are missing.
GgufWriter requantize(const GgufFile& in, const RequantizeOptions& options);

// The type a tensor is written in under these options (after fallbacks).
GgmlType requantized_type(const GgufTensorInfo& t, const RequantizeOptions& options);

}  // namespace kestrel
