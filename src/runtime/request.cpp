#include "runtime/request.h"

#include <algorithm>

#include "core/splitmix.h"

namespace kestrel {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::Stop: return "stop";
    case FinishReason::Context: return "context";
    case FinishReason::Length: break;
  }
  return "length";
}

const char* openai_finish_reason(FinishReason r) {
  return r == FinishReason::Length || r == FinishReason::Context ? "length" : "stop";
}

std::vector<int32_t> media_placeholders(uint64_t hash, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = -1 - static_cast<int32_t>(splitmix64(hash) & 0x3fffffffu);
  return ids;
}

void media_rope_position(const std::vector<MediaSpan>& media, int64_t i, int32_t out[3]) {
  int64_t saved = 0;
  for (const MediaSpan& m : media) {
    if (i < m.start) break;
    if (m.grid_w <= 0) continue;
    if (i < m.end()) {
      const int64_t t = m.start - saved, k = i - m.start;
      out[0] = static_cast<int32_t>(t);
      out[1] = static_cast<int32_t>(t + k / m.grid_w);
      out[2] = static_cast<int32_t>(t + k % m.grid_w);
      return;
    }
    saved += m.n_tokens - std::max(m.grid_w, m.grid_h);
  }
  out[0] = out[1] = out[2] = static_cast<int32_t>(i - saved);
}

bool has_media_grid(const std::vector<MediaSpan>& media) {
  return std::any_of(media.begin(), media.end(), [](const MediaSpan& m) { return m.grid_w > 0; });
}

}  // namespace kestrel
