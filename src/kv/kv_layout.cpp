#include "kv/kv_layout.h"

#include <fmt/format.h>

namespace kestrel {

std::string KvLayout::describe_bytes() const {
  const double full = static_cast<double>(full_bytes_per_token()) / 1024;
  std::string s = n_sliding() == 0 ? fmt::format("{:.1f} KiB/token", full)
                                   : fmt::format("{:.1f} KiB/token + {:.1f} KiB/token over the last {}", full,
                                                 static_cast<double>(sliding_bytes_per_token()) / 1024, sliding_window);
  if (n_recurrent > 0)
    s += fmt::format(" + {:.1f} MiB/sequence of recurrent state ({} layers, with its checkpoint and a prefix snapshot)",
                     static_cast<double>(state_bytes_per_seq()) / (1024 * 1024), n_recurrent);
  return s;
}

int64_t KvLayout::tokens_in(int64_t bytes) const {
  const int64_t window_bytes = static_cast<int64_t>(sliding_window) * sliding_bytes_per_token();
  if (full_bytes_per_token() == 0) return -1;
  if (bytes <= window_bytes) return bytes / bytes_per_token();
  return (bytes - window_bytes) / full_bytes_per_token() + (n_sliding() ? sliding_window : 0);
}

}  // namespace kestrel
