#pragma once
// llama-server's native POST /completion: a prompt completed (no chat template), answered in llama-server's shape
// (infill_api.h's answer: `content`, `stop`, the token counts and why it stopped; streamed as server-sent events of
// such objects). The prompt is one of llama-server's forms: a string (special tokens parsed, BOS where the
// vocabulary adds one), token ids, ids and strings mixed, or the object {"prompt_string", "multimodal_data"}
// whose files (images, audio) go where the string has the media marker (media_input.h's prompt_object). One prompt
// a request: several (llama-server answers an array) are a 400 naming the field. A field llama-server reads that
// Kestrel does not implement is a 400 naming it, not an answer computed without it.
#include <nlohmann/json.hpp>
#include <string>

#include "serving/api/completion_ask.h"
#include "serving/api/openai_api.h"

namespace kestrel {

struct LlamaCompletionRequest {
  CompletionAsk ask;
  std::string prompt_text;  // the prompt as text (llama-server's `prompt` field in the answer)
};

// Throws ApiError naming the field.
LlamaCompletionRequest llama_completion_ask(const nlohmann::ordered_json& body, const ApiContext& ctx);

}  // namespace kestrel
