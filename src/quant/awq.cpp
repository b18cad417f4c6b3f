#include "quant/awq.h"

#include "model/family.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "formats/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace kestrel {
namespace {

std::vector<float> load_f32(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) throw Error(fmt::format("AWQ: tensor '{}' not found", name));
  std::vector<float> out(static_cast<size_t>(t->n_elements()));
  const int64_t cols = t->ne[0], rows = t->n_elements() / cols;
  const size_t rb = row_bytes(t->type, cols);
  for (int64_t r = 0; r < rows; r++) dequantize_row(t->type, t->data + r * rb, out.data() + r * cols, cols);
  return out;
}

// What divides by s to keep the function unchanged.
struct Fold {
  std::string vector;  // a 1-D norm weight divided elementwise
  std::string rows;    // a matrix whose rows (output channels) are divided
  std::string bias;    // its bias, divided the same way (may be absent)
  int tie_heads = 1;   // attention output: query heads sharing one KV head share s
  int head_dim = 0;
};

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::optional<Fold> fold_for(const GgufFile& f, const std::string& first_weight) {
  const std::string arch = f.get_string("general.architecture").value_or("");
  if (const Family* fam = find_family(arch); !fam || !fam->awq_folds) return std::nullopt;
  if (first_weight == "output.weight") return Fold{"output_norm.weight", "", "", 1, 0};
  if (!starts_with(first_weight, "blk.")) return std::nullopt;
  const std::string blk = first_weight.substr(0, first_weight.find('.', 4) + 1);  // "blk.N."
  auto has = [&](const std::string& n) { return f.find_tensor(n) != nullptr; };
  if (first_weight.ends_with(".attn_q.weight")) return Fold{blk + "attn_norm.weight", "", "", 1, 0};
  if (first_weight.ends_with(".ffn_gate.weight") || first_weight.ends_with(".ffn_up.weight"))
    return Fold{blk + "ffn_norm.weight", "", "", 1, 0};
  if (first_weight.ends_with(".ffn_down.weight") && has(blk + "ffn_up.weight"))
    return Fold{"", blk + "ffn_up.weight", "", 1, 0};
  if (first_weight.ends_with(".attn_output.weight") && has(blk + "attn_v.weight")) {
    const int64_t heads = f.get_int(arch + ".attention.head_count").value_or(0);
    const int64_t kv = f.get_int(arch + ".attention.head_count_kv").value_or(heads);
    const GgufTensorInfo* wo = f.find_tensor(first_weight);
    if (heads <= 0 || kv <= 0 || heads % kv != 0 || wo->ne[0] % heads != 0) return std::nullopt;
    return Fold{"", blk + "attn_v.weight", has(blk + "attn_v.bias") ? blk + "attn_v.bias" : "",
                static_cast<int>(heads / kv), static_cast<int>(wo->ne[0] / heads)};
  }
  return std::nullopt;
}

// s_c = mean|x_c|^alpha, normalised so that max * min = 1 (AWQ's choice:
// the scales stay centred around 1 whatever alpha is); tied over the query
// heads of a KV group when tie > 1 (their inputs come from one value row).
std::vector<float> scales_for(const ActivationSite& site, double alpha, const Fold& fold) {
  const int64_t d = site.cols;
  std::vector<double> s(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; c++) s[c] = std::pow(std::max(site.mean_abs(c), 1e-8), alpha);
  if (fold.tie_heads > 1) {
    const int64_t hd = fold.head_dim, g = fold.tie_heads, kv_heads = d / hd / g;
    for (int64_t kv = 0; kv < kv_heads; kv++)
      for (int64_t j = 0; j < hd; j++) {
        double m = 0;
        for (int64_t h = 0; h < g; h++) m += s[(kv * g + h) * hd + j];
        for (int64_t h = 0; h < g; h++) s[(kv * g + h) * hd + j] = m / static_cast<double>(g);
      }
  }
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  const double norm = std::sqrt(*lo * *hi);
  std::vector<float> out(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; c++) out[c] = static_cast<float>(std::max(s[c] / norm, 1e-4));
  return out;
}

// Sum over samples x and rows r of (x . (W_r - Weff_r))², where Weff is W*s
// rounded in `type` and divided by s again: the output error the scaled,
// rounded weights cause on the calibration inputs.
double output_error(const std::vector<float>& w, int64_t rows, int64_t cols, GgmlType type, const std::vector<float>& s,
                    const ActivationSite& site, ThreadPool& pool) {
  const int64_t n_samples = site.n_samples();
  std::vector<double> per_thread(static_cast<size_t>(pool.size()), 0.0);
  pool.run([&](int ti, int nt) {
    std::vector<float> row(static_cast<size_t>(cols)), delta(static_cast<size_t>(cols));
    std::vector<uint8_t> q(row_bytes(type, cols));
    double err = 0;
    for (int64_t r = ti; r < rows; r += nt) {
      const float* wr = w.data() + r * cols;
      for (int64_t c = 0; c < cols; c++) row[c] = wr[c] * s[c];
      quantize_row(type, row.data(), q.data(), cols);
      dequantize_row(type, q.data(), row.data(), cols);
      for (int64_t c = 0; c < cols; c++) delta[c] = wr[c] - row[c] / s[c];
      for (int64_t k = 0; k < n_samples; k++) {
        const float* x = site.samples.data() + k * cols;
        float dot = 0;
        for (int64_t c = 0; c < cols; c++) dot += x[c] * delta[c];
        err += static_cast<double>(dot) * dot;
      }
    }
    per_thread[static_cast<size_t>(ti)] = err;
  });
  double total = 0;
  for (double e : per_thread) total += e;
  return total;
}

}  // namespace

AwqResult awq_scale(const GgufFile& in, const CalibrationStats& stats,
                    const std::function<GgmlType(const std::string&)>& type_of, int n_threads, double fixed_alpha) {
  AwqResult result;
  ThreadPool pool(n_threads);
  auto tensor = [&](const std::string& name) -> std::vector<float>& {
    auto it = result.tensors.find(name);
    if (it == result.tensors.end()) it = result.tensors.emplace(name, load_f32(in, name)).first;
    return it->second;
  };
  for (const ActivationSite& site : stats.sites) {
    const auto fold = fold_for(in, site.weights[0]);
    if (!fold || site.n_samples() == 0) continue;
    bool all_present = true;
    for (const auto& name : site.weights) all_present = all_present && in.find_tensor(name) != nullptr;
    if (!all_present) continue;
    const int64_t cols = site.cols;
    double best_err = -1, best_alpha = 0, base_err = 0;
    std::vector<float> best_s;
    for (int step = 0; step <= 10; step++) {
      const double alpha = fixed_alpha >= 0 ? fixed_alpha : step / 10.0;
      if (fixed_alpha >= 0 && step > 0) break;
      const std::vector<float> s = scales_for(site, alpha, *fold);
      double err = 0;
      for (const auto& name : site.weights) {
        const std::vector<float>& w = tensor(name);
        err += output_error(w, static_cast<int64_t>(w.size()) / cols, cols, type_of(name), s, site, pool);
      }
      if (step == 0) base_err = err;
      if (best_err < 0 || err < best_err || fixed_alpha >= 0) best_err = err, best_alpha = alpha, best_s = s;
    }
    result.report.push_back(fmt::format("{}: alpha {:.1f}, output error {:.4g} -> {:.4g} ({:+.1f}%)", site.weights[0],
                                        best_alpha, base_err, best_err,
                                        base_err > 0 ? 100.0 * (best_err / base_err - 1) : 0.0));
    if (best_alpha == 0) continue;
    for (const auto& name : site.weights) {
      std::vector<float>& w = tensor(name);
      for (size_t i = 0; i < w.size(); i++) w[i] *= best_s[i % static_cast<size_t>(cols)];
      result.input_scale[name] = best_s;
    }
    if (!fold->vector.empty()) {
      std::vector<float>& v = tensor(fold->vector);
      for (int64_t c = 0; c < cols; c++) v[c] /= best_s[c];
    } else {
      // Output channel c of the producing matrix feeds input channel c here;
      // for attn_v (GQA) channel (kv * group + h) * hd + j comes from v row kv * hd + j.
      std::vector<float>& p = tensor(fold->rows);
      const int64_t p_cols = in.find_tensor(fold->rows)->ne[0], p_rows = static_cast<int64_t>(p.size()) / p_cols;
      std::vector<float> row_scale(static_cast<size_t>(p_rows));
      for (int64_t r = 0; r < p_rows; r++) {
        if (fold->tie_heads > 1) {
          const int64_t hd = fold->head_dim, kv = r / hd, j = r % hd;
          row_scale[r] = best_s[kv * fold->tie_heads * hd + j];
        } else {
          row_scale[r] = best_s[r];
        }
        for (int64_t c = 0; c < p_cols; c++) p[r * p_cols + c] /= row_scale[r];
      }
      if (!fold->bias.empty()) {
        std::vector<float>& b = tensor(fold->bias);
        for (int64_t r = 0; r < p_rows; r++) b[r] /= row_scale[r];
      }
    }
  }
  return result;
}

}  // namespace kestrel
