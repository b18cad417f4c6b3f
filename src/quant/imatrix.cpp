#include "quant/imatrix.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace kestrel {
namespace {

constexpr const char* kIn = ".in_sum2";
constexpr const char* kCounts = ".counts";

// "blk.0.ffn_up_exps.weight.7" -> ("blk.0.ffn_up_exps.weight", 7); a plain name -> (name, -1).
std::pair<std::string, int64_t> split_slice(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 >= name.size()) return {name, -1};
  const std::string tail = name.substr(dot + 1);
  if (!std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; })) return {name, -1};
  return {name.substr(0, dot), std::stoll(tail)};
}

}  // namespace

std::vector<float> ImportanceMatrix::importance(const std::string& weight, int64_t mat) const {
  const auto it = entries.find(weight);
  if (it == entries.end()) return {};
  const ImportanceEntry& e = it->second;
  if (mat < 0 || mat >= e.n_mat || e.counts[mat] <= 0) return {};
  std::vector<float> v(static_cast<size_t>(e.n_per_row));
  for (int64_t c = 0; c < e.n_per_row; c++) v[c] = e.in_sum2[mat * e.n_per_row + c] / e.counts[mat];
  return v;
}

ImportanceMatrix importance_from_calibration(const CalibrationStats& stats, const std::string& dataset,
                                             uint32_t chunk_count, uint32_t chunk_size, bool with_output) {
  ImportanceMatrix m;
  m.datasets = {dataset};
  m.chunk_count = chunk_count;
  m.chunk_size = chunk_size;
  // Slices first counted, then filled: an entry's n_mat is its largest slice index + 1.
  for (const auto& site : stats.sites)
    for (const auto& w : site.weights) {
      const auto [base, slice] = split_slice(w);
      if (!base.ends_with(".weight") || (base == "output.weight" && !with_output)) continue;
      ImportanceEntry& e = m.entries[base];
      e.n_per_row = site.cols;
      e.n_mat = std::max(e.n_mat, slice + 1);
    }
  for (auto& [name, e] : m.entries) {
    e.in_sum2.assign(static_cast<size_t>(e.n_mat * e.n_per_row), 0.0f);
    e.counts.assign(static_cast<size_t>(e.n_mat), 0.0f);
  }
  for (const auto& site : stats.sites)
    for (const auto& w : site.weights) {
      const auto [base, slice] = split_slice(w);
      const auto it = m.entries.find(base);
      if (it == m.entries.end()) continue;
      ImportanceEntry& e = it->second;
      const int64_t mat = std::max<int64_t>(slice, 0);
      for (int64_t c = 0; c < e.n_per_row; c++) e.in_sum2[mat * e.n_per_row + c] = static_cast<float>(site.sq_sum[c]);
      e.counts[mat] = static_cast<float>(site.n_rows);
    }
  return m;
}

void write_imatrix(const ImportanceMatrix& m, const std::string& path) {
  GgufWriter w;
  w.set_str("general.type", "imatrix");
  w.set("imatrix.datasets", GgufValue::strings(m.datasets));
  w.set_u32("imatrix.chunk_count", m.chunk_count);
  w.set_u32("imatrix.chunk_size", m.chunk_size);
  for (const auto& [name, e] : m.entries) {  // std::map: sorted by name, as llama.cpp writes them
    w.add_tensor_bytes(name + kIn, GgmlType::F32, {e.n_per_row, e.n_mat}, e.in_sum2.data());
    w.add_tensor_bytes(name + kCounts, GgmlType::F32, {1, e.n_mat}, e.counts.data());
  }
  w.write_file(path);
}

ImportanceMatrix read_imatrix(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  const auto type = f.get_string("general.type");
  if (type != "imatrix")
    throw Error(fmt::format("{}: not an importance matrix (general.type is '{}', not 'imatrix'; llama.cpp's "
                            "legacy .dat files can be converted with llama-imatrix --in-file F --output-format gguf)",
                            path, type.value_or("")));
  ImportanceMatrix m;
  if (const GgufValue* d = f.find("imatrix.datasets"))
    for (const auto& item : d->as_array().items) m.datasets.push_back(item.as_string());
  m.chunk_count = static_cast<uint32_t>(f.get_int("imatrix.chunk_count").value_or(0));
  m.chunk_size = static_cast<uint32_t>(f.get_int("imatrix.chunk_size").value_or(0));
  std::map<std::string, const GgufTensorInfo*> sums, counts;
  for (const auto& t : f.tensors()) {
    if (t.type != GgmlType::F32) throw Error(fmt::format("{}: tensor '{}' is {}, not F32", path, t.name, type_name(t.type)));
    if (t.name.ends_with(kIn)) sums[t.name.substr(0, t.name.size() - 8)] = &t;
    else if (t.name.ends_with(kCounts)) counts[t.name.substr(0, t.name.size() - 7)] = &t;
    // .in_sum (means, for statistics) and anything else: not needed to quantize
  }
  for (const auto& [name, s] : sums) {
    const auto c = counts.find(name);
    if (c == counts.end()) throw Error(fmt::format("{}: '{}' has sums but no counts", path, name));
    const int64_t n_mat = s->ne.size() > 1 ? s->ne[1] : 1;
    if (c->second->n_elements() != n_mat)
      throw Error(fmt::format("{}: '{}' has {} matrices of sums but {} counts", path, name, n_mat, c->second->n_elements()));
    ImportanceEntry e;
    e.n_per_row = s->ne[0];
    e.n_mat = n_mat;
    const auto* sp = reinterpret_cast<const float*>(s->data);
    const auto* cp = reinterpret_cast<const float*>(c->second->data);
    e.in_sum2.assign(sp, sp + s->n_elements());
    e.counts.assign(cp, cp + n_mat);
    for (float v : e.in_sum2)
      if (!std::isfinite(v) || v < 0) throw Error(fmt::format("{}: '{}' holds a sum of squares {}", path, name, v));
    m.entries[name] = std::move(e);
  }
  for (const auto& [name, c] : counts)
    if (!sums.count(name)) throw Error(fmt::format("{}: '{}' has counts but no sums", path, name));
  if (m.entries.empty()) throw Error(fmt::format("{}: the importance matrix has no entries", path));
  return m;
}

}  // namespace kestrel
