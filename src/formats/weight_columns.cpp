// weight_columns (formats/weight.h): a rank's share of a row-parallel matrix.
// Quantized rows are runs of self-contained blocks, so whole blocks copy as
// bytes and keep their exact values.
#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "formats/weight.h"

namespace kestrel {

Weight weight_columns(const Weight& w, int64_t c0, int64_t n, const std::string& name) {
  const int64_t block = traits(w.type).block_size;
  if (c0 < 0 || n <= 0 || c0 + n > w.cols())
    throw Error(fmt::format("{}: columns [{}, {}) are outside its {} columns", w.name, c0, c0 + n, w.cols()));
  if (c0 % block != 0 || n % block != 0)
    throw Error(fmt::format("{}: a share of {} columns from column {} is not whole {} blocks of {} values; "
                            "this split needs a type with smaller blocks or fewer ranks",
                            w.name, n, c0, type_name(w.type), block));
  const size_t skip = row_bytes(w.type, c0), bytes = row_bytes(w.type, n);
  const int64_t rows = w.rows();
  auto copy = std::shared_ptr<uint8_t[]>(new uint8_t[bytes * static_cast<size_t>(rows)]);
  for (int64_t r = 0; r < rows; r++) std::memcpy(copy.get() + r * bytes, w.row(r) + skip, bytes);
  Weight out{name, w.type, {n, rows}, copy.get(), bytes * static_cast<size_t>(rows), nullptr, nullptr};
  out.owner = std::shared_ptr<const void>(copy, copy.get());
  return out;
}

}  // namespace kestrel
