#include "quant/requantize.h"

#include <fmt/format.h>

#include <cstring>

#include <algorithm>
#include <vector>

#include "formats/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/awq.h"
#include "quant/gptq.h"
#include "formats/quant_grid.h"
#include "formats/storage_type.h"

namespace kestrel {

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::Rtn: return "rtn";
    case QuantMethod::Awq: return "awq";
    case QuantMethod::Gptq: return "gptq";
    case QuantMethod::AwqGptq: return "awq+gptq";
  }
  return "?";
}

GgmlType requantized_type(const GgufTensorInfo& t, const RequantizeOptions& o) {
  const auto it = o.tensor_types.find(t.name);
  if (is_moe_router(t.name) && it == o.tensor_types.end())
    return t.type == GgmlType::F16 || t.type == GgmlType::BF16 ? t.type : GgmlType::F32;
  return storage_type_for(it != o.tensor_types.end() && t.ne.size() > 1 ? it->second : o.type, t.ne);
}

namespace {

bool uses_awq(QuantMethod m) { return m == QuantMethod::Awq || m == QuantMethod::AwqGptq; }
bool uses_gptq(QuantMethod m) { return m == QuantMethod::Gptq || m == QuantMethod::AwqGptq; }

// GPTQ's Hessian for a weight whose input is now x / s: diag(1/s) H diag(1/s).
std::vector<double> scaled_hessian(const std::vector<double>& xtx, int64_t n, const std::vector<float>* s) {
  if (!s) return xtx;
  std::vector<double> h(xtx.size());
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) h[i * n + j] = xtx[i * n + j] / (static_cast<double>((*s)[i]) * (*s)[j]);
  return h;
}

}  // namespace

GgufWriter requantize(const GgufFile& in, const RequantizeOptions& o) {
  if (!can_quantize_to(o.type))
    throw Error(fmt::format("--type {} cannot be written (only {})", type_name(o.type), kWritableTypes));
  const auto integer = [](GgmlType t) {
    return t == GgmlType::I8 || t == GgmlType::I16 || t == GgmlType::I32 || t == GgmlType::I64;
  };
  for (const auto& [name, type] : o.tensor_types)
    if (!can_quantize_to(type) && !integer(type)) throw Error(fmt::format("tensor '{}': type {} cannot be written", name, type_name(type)));
  if (o.method != QuantMethod::Rtn && !o.calib)
    throw Error(fmt::format("--method {} needs calibration text (--calib FILE)", quant_method_name(o.method)));
  if (uses_gptq(o.method))
    for (const auto& site : o.calib->sites)
      if (site.xtx.empty()) throw Error("GPTQ needs calibration statistics collected with the Hessian");

  auto awq = std::make_shared<AwqResult>();
  if (uses_awq(o.method)) {
    *awq = awq_scale(
        in, *o.calib,
        [&](const std::string& name) { return requantized_type(*in.find_tensor(name), o); }, o.n_threads,
        o.awq_alpha);
    if (o.on_report)
      for (const auto& line : awq->report) o.on_report("awq " + line);
  }

  GgufWriter w;
  auto done = std::make_shared<int64_t>(0);
  const auto total = static_cast<int64_t>(in.tensors().size());
  const auto progress = o.on_progress;
  for (const auto& [k, v] : in.metadata()) w.set(k, v);
  w.set_u32("general.file_type", o.file_type ? o.file_type : llama_file_type(o.type));
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, as llama-quantize writes it
  for (const auto& t : in.tensors()) {
    if (integer(t.type)) {  // a table, not a weight (DeepSeek-V4's tid2eid): copied, as llama-quantize does
      const GgufTensorInfo* src = &t;
      w.add_tensor(t.name, t.type, t.ne, [src, done, total, progress](uint8_t* dst, size_t bytes) {
        std::memcpy(dst, src->data, bytes);
        if (progress) progress(++*done, total, src->name);
      });
      continue;
    }
    if (!traits(t.type).computable)
      throw Error(fmt::format("{}: tensor '{}' has type {}, which Kestrel cannot read yet", in.path(), t.name,
                              type_name(t.type)));
    const GgmlType type = requantized_type(t, o);
    const auto wanted = o.tensor_types.count(t.name) ? o.tensor_types.at(t.name) : o.type;
    if (type != wanted && t.ne.size() > 1 && o.on_fallback) o.on_fallback(t.name, type);
    const GgufTensorInfo* src = &t;
    const ActivationSite* site = o.calib ? o.calib->find(t.name) : nullptr;
    const bool float_type = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
    if (uses_gptq(o.method) && site && t.ne.size() == 2 && !float_type && !has_quant_grid(type))
      throw Error(fmt::format("GPTQ cannot round tensor '{}' to {} yet (its grid is not implemented): use --method "
                              "rtn or awq for this type",
                              t.name, type_name(type)));
    const bool gptq = uses_gptq(o.method) && site && t.ne.size() == 2 && has_quant_grid(type) && !site->xtx.empty();
    const int threads = o.n_threads;
    const double damp = o.gptq_damp;
    const bool needs_importance = needs_importance_matrix(t.name, type) && t.ne.size() >= 2 && type != t.type;
    if (needs_importance && !o.imatrix)
      throw Error(fmt::format("tensor '{}' would be {}, which is rounded only with an importance matrix: --imatrix FILE "
                              "(make one with kestrel imatrix -m MODEL -f TEXT)",
                              t.name, type_name(type)));
    // Each matrix's importance row (3-D tensors: one per expert), when the imatrix has one for this tensor.
    auto importance = std::make_shared<std::vector<std::vector<float>>>();
    if (o.imatrix && t.ne.size() >= 2 && uses_importance(type)) {
      const int64_t n_mat = t.ne.size() > 2 ? t.ne[2] : 1;
      for (int64_t m = 0; m < n_mat; m++) importance->push_back(o.imatrix->importance(t.name, m));
      // Said, not silent: a matrix the importance matrix has no data for is rounded unweighted.
      const auto missing = std::count_if(importance->begin(), importance->end(), [](const auto& v) { return v.empty(); });
      if (needs_importance && missing == n_mat)
        throw Error(fmt::format("the importance matrix has no data for '{}', which would be {}: that type is rounded "
                                "only with one (quantize this tensor to another type, or compute the matrix on text "
                                "that reaches it)",
                                t.name, type_name(type)));
      if (missing > 0 && o.on_report)
        o.on_report(missing == n_mat ? fmt::format("imatrix: no data for {}: rounded without importance", t.name)
                                     : fmt::format("imatrix: no data for {} of the {} matrices of {} (experts no "
                                                   "calibration token reached): those rounded without importance",
                                                   missing, n_mat, t.name));
      if (!importance->empty() && !importance->front().empty() &&
          static_cast<int64_t>(importance->front().size()) != t.ne[0])
        throw Error(fmt::format("the importance matrix's '{}' has {} columns, the tensor {}", t.name,
                                importance->front().size(), t.ne[0]));
    }
    std::shared_ptr<const CalibrationStats> calib = o.calib;
    w.add_tensor(t.name, type, t.ne, [src, type, threads, awq, gptq, site, damp, calib, done, total, progress, importance](uint8_t* dst,
                                                                                                      size_t) {
      struct Report {  // after the tensor, on either path below
        const std::function<void(int64_t, int64_t, const std::string&)>& f;
        int64_t& n;
        int64_t total;
        const std::string& name;
        ~Report() {
          if (f) f(++n, total, name);
        }
      } report{progress, *done, total, src->name};
      const int64_t cols = src->ne[0], rows = src->n_elements() / cols;
      const size_t in_row = row_bytes(src->type, cols), out_row = row_bytes(type, cols);
      const auto changed = awq->tensors.find(src->name);
      const float* floats = changed != awq->tensors.end() ? changed->second.data() : nullptr;
      if (gptq) {
        std::vector<float> m(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; r++)
          if (floats) std::copy_n(floats + r * cols, cols, m.data() + r * cols);
          else dequantize_row(src->type, src->data + r * in_row, m.data() + r * cols, cols);
        const auto s = awq->input_scale.find(src->name);
        GptqOptions go;
        go.damp = damp;
        go.n_threads = threads;
        gptq_quantize(type, m.data(), rows, cols,
                      scaled_hessian(site->xtx, cols, s != awq->input_scale.end() ? &s->second : nullptr), go, dst);
        return;
      }
      ThreadPool pool(threads);
      pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; r++) {
          if (floats) std::copy_n(floats + r * cols, cols, row.data());
          else dequantize_row(src->type, src->data + r * in_row, row.data(), cols);
          const int64_t mat = src->ne.size() > 2 ? r / src->ne[1] : 0;
          const float* imp = static_cast<size_t>(mat) < importance->size() && !(*importance)[mat].empty()
                                 ? (*importance)[mat].data()
                                 : nullptr;
          quantize_row(type, row.data(), dst + r * out_row, cols, imp);
        }
      });
    });
  }
  return w;
}

}  // namespace kestrel
