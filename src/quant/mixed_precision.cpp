#include "quant/mixed_precision.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "formats/block_formats.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/requantize.h"
#include "formats/storage_type.h"
#include "measure/perplexity.h"

namespace kestrel {
namespace {

// A scratch directory removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kestrel-mixed-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw Error("cannot create a scratch directory for the sensitivity runs");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Candidate {
  GgmlType type;
  int64_t bytes;
  double kld;
};

}  // namespace

MixedPrecisionPlan plan_mixed_precision(const std::string& model_path, const std::string& text,
                                        const MixedPrecisionOptions& o) {
  if (o.target_kld < 0 && o.target_bytes < 0) throw Error("mixed precision needs --target-kld or --target-size");
  if (o.ladder.empty()) throw Error("mixed precision needs at least one candidate type");
  const GgufFile in = GgufFile::open(model_path);
  ScratchDir dir;
  auto run = [&](const std::string& path, PerplexityOptions po) {
    LoadOptions eo;
    eo.model_path = path;
    eo.n_threads = o.n_threads;
    eo.n_ctx = o.n_ctx;
    eo.use_mmap = true;
    LoadedModel e = LoadedModel::load(eo);
    po.n_ctx = o.n_ctx;
    po.max_chunks = o.max_chunks;
    return perplexity(e, text, po);
  };
  PerplexityOptions base;
  base.save_logprobs = dir.file("base.lp");
  run(model_path, base);
  PerplexityOptions against;
  against.kl_base = base.save_logprobs;

  // Sensitivities: every matrix alone in every candidate type (types that
  // fall back to the same storage are measured once).
  std::vector<std::string> names;
  std::map<std::string, std::vector<Candidate>> cands;
  int64_t fixed_bytes = 0;  // tensors that are not planned (1-D)
  for (const auto& t : in.tensors()) {
    if (t.ne.size() < 2) {
      fixed_bytes += static_cast<int64_t>(row_bytes(GgmlType::F32, t.n_elements()));
      continue;
    }
    names.push_back(t.name);
    auto& list = cands[t.name];
    for (const GgmlType want : o.ladder) {
      const GgmlType type = storage_type_for(want, t.ne);
      const auto bytes = static_cast<int64_t>(row_bytes(type, t.ne[0]) * (t.n_elements() / t.ne[0]));
      if (std::any_of(list.begin(), list.end(), [&](const Candidate& c) { return c.type == type; })) continue;
      RequantizeOptions ro;
      ro.type = GgmlType::F32;
      ro.tensor_types[t.name] = type;
      ro.n_threads = o.n_threads > 0 ? o.n_threads : 1;
      const std::string path = dir.file("one.gguf");
      requantize(in, ro).write_file(path);
      const double kld = std::max(0.0, run(path, against).kld_mean);
      list.push_back({type, bytes, kld});
      if (o.progress) o.progress(fmt::format("{} as {}: KLD {:.6f}", t.name, type_name(type), kld));
    }
    // Narrowest first, and a wider type is only worth having if it is more accurate.
    std::sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) { return a.bytes < b.bytes; });
  }

  // Greedy: everything at its narrowest, then widen where KLD per byte is best.
  std::map<std::string, size_t> pick;
  double kld = 0;
  int64_t bytes = fixed_bytes;
  for (const auto& n : names) pick[n] = 0, kld += cands[n][0].kld, bytes += cands[n][0].bytes;
  auto done = [&] { return o.target_kld >= 0 ? kld <= o.target_kld : false; };
  while (!done()) {
    const std::string* best = nullptr;
    size_t best_next = 0;
    double best_gain = 0;
    for (const auto& n : names) {
      const auto& list = cands[n];
      for (size_t j = pick[n] + 1; j < list.size(); j++) {
        const double dk = list[pick[n]].kld - list[j].kld;
        const double db = static_cast<double>(list[j].bytes - list[pick[n]].bytes);
        if (dk <= 0 || db <= 0) continue;
        if (o.target_bytes >= 0 && bytes + static_cast<int64_t>(db) > o.target_bytes) continue;
        if (dk / db > best_gain) best_gain = dk / db, best = &n, best_next = j;
      }
    }
    if (!best) break;
    const auto& list = cands[*best];
    kld += list[best_next].kld - list[pick[*best]].kld;
    bytes += list[best_next].bytes - list[pick[*best]].bytes;
    pick[*best] = best_next;
  }

  MixedPrecisionPlan plan;
  for (const auto& n : names) {
    const Candidate& c = cands[n][pick[n]];
    plan.tensors.push_back({n, c.type, c.bytes, c.kld});
    plan.types[n] = c.type;
  }
  plan.predicted_kld = kld;
  plan.tensor_bytes = bytes;
  plan.met = o.target_kld >= 0 ? kld <= o.target_kld : bytes <= o.target_bytes;
  return plan;
}

}  // namespace kestrel
