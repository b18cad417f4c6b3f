#include "runtime/request.h"

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

}  // namespace kestrel
