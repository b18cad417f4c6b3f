#include "runtime/request.h"

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

}  // namespace kestrel

namespace kestrel {

std::vector<int32_t> media_placeholders(uint64_t hash, int64_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) {
    uint64_t z = hash + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    ids[static_cast<size_t>(i)] = -1 - static_cast<int32_t>((z ^ (z >> 31)) & 0x3fffffffu);
  }
  return ids;
}

}  // namespace kestrel
