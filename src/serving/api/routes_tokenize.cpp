// llama.cpp-style tokenizer endpoints ("content"; vLLM's "prompt" also
// accepted): loadtest uses them to build prompts of exact token lengths.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "serving/api/anthropic_api.h"
#include "serving/api/api_routes.h"
#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

HttpResponse ApiRoutes::tokenize(const HttpRequest& req) const {
  try {
    const auto j = parse_body(req.body);
    const char* key = j.contains("content") ? "content" : "prompt";
    if (!j.is_object() || !j.contains(key) || !j[key].is_string())
      return error_response({400, "'content' must be a string", "content", "invalid_request_error", ""});
    const bool special = j.value("add_special", true);
    const auto ids = engine_.engine().tokenizer->encode(j[key].get<std::string>(), special, false);
    return json_response(json_text({{"tokens", ids}, {"count", ids.size()}}));
  } catch (const ApiError& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response({400, std::string("bad /tokenize body: ") + e.what(), "", "invalid_request_error", ""});
  }
}

// llama.cpp's endpoint: the prompt text a chat completion body renders to, nothing generated.
HttpResponse ApiRoutes::apply_template(const HttpRequest& req) const {
  try {
    const auto j = parse_body(req.body);
    if (!j.is_object()) return error_response(bad_request("", "the body must be a JSON object"));
    check_request_fields(j, true);  // a chat completion's body: what only shapes the generation is not used here
    const ApiContext ctx = api_context();
    checked_model_name(ctx, j);
    return json_response(json_text({{"prompt", render_chat_request(ctx, j).rendered.text}}));
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

// What a conversation costs before it is sent: the tokens its rendered prompt holds (tools and system included),
// so a client can budget the context.
HttpResponse ApiRoutes::count_tokens(const HttpRequest& req, Api api) const {
  try {
    const ApiContext ctx = api_context();
    const auto j = parse_body(req.body);
    nlohmann::ordered_json chat_input;
    if (api == Api::Messages) {
      chat_input = anthropic_ask(j, ctx, true).chat_input;
    } else {
      if (!j.is_object()) throw bad_request("", "the body must be a JSON object");
      check_request_fields(j, true);
      checked_model_name(ctx, j);
      chat_input = j;
    }
    const RenderedChat chat = render_chat_request(ctx, chat_input).rendered;
    const size_t n = ctx.chat_template->tokenize(ctx.tokenizer, chat, ctx.allow_special_in_content).size();
    return json_response(json_text({{"input_tokens", n}}));
  } catch (const ApiError& e) {
    return api == Api::Messages ? anthropic_error_response(e) : error_response(e);
  }
}

HttpResponse ApiRoutes::detokenize(const HttpRequest& req) const {
  try {
    const auto j = parse_body(req.body);
    const auto ids = j.at("tokens").get<std::vector<int32_t>>();
    const auto n = static_cast<int32_t>(engine_.engine().tokenizer->vocab().size());
    for (int32_t t : ids)
      if (t < 0 || t >= n) return error_response({400, "token id out of range", "tokens", "invalid_request_error", ""});
    return json_response(json_text({{"content", engine_.engine().tokenizer->decode(ids)}}));
  } catch (const ApiError& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response({400, std::string("bad /detokenize body: ") + e.what(), "tokens", "invalid_request_error", ""});
  }
}

}  // namespace kestrel
