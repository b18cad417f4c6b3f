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
