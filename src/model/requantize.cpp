#include "model/requantize.h"

#include <fmt/format.h>

#include <vector>

#include "core/block_formats.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/storage_type.h"

namespace kestrel {

GgufWriter requantize(const GgufFile& in, const RequantizeOptions& o) {
  if (!can_quantize_to(o.type))
    throw Error(fmt::format("--type {} cannot be written (only {})", type_name(o.type), kWritableTypes));
  GgufWriter w;
  for (const auto& [k, v] : in.metadata()) w.set(k, v);
  w.set_u32("general.file_type", llama_file_type(o.type));
  for (const auto& t : in.tensors()) {
    if (!traits(t.type).computable)
      throw Error(fmt::format("{}: tensor '{}' has type {}, which Kestrel cannot read yet", in.path(), t.name,
                              type_name(t.type)));
    const GgmlType type = storage_type_for(o.type, t.ne);
    if (type != o.type && t.ne.size() > 1 && o.on_fallback) o.on_fallback(t.name, type);
    const GgufTensorInfo* src = &t;
    const int threads = o.n_threads;
    w.add_tensor(t.name, type, t.ne, [src, type, threads](uint8_t* dst, size_t) {
      const int64_t cols = src->ne[0], rows = src->n_elements() / cols;
      const size_t in_row = row_bytes(src->type, cols), out_row = row_bytes(type, cols);
      ThreadPool pool(threads);
      pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = r0; r < r1; r++) {
          dequantize_row(src->type, src->data + r * in_row, row.data(), cols);
          quantize_row(type, row.data(), dst + r * out_row, cols);
        }
      });
    });
  }
  return w;
}

}  // namespace kestrel
