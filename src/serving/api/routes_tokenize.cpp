// The tokenizer endpoints, in llama-server's shapes and vLLM's: loadtest builds prompts of exact token lengths
// with them, lm-eval-harness's remote tokenizer tokenizes its requests with them.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "serving/api/anthropic_api.h"
#include "serving/api/api_routes.h"
#include "serving/api/completion_ask.h"
#include "serving/api/openai_api.h"
#include "tokenizer/utf8.h"

namespace kestrel {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// A token's text for with_pieces: a string when its bytes are UTF-8 on their own, else the bytes (llama-server's way).
json piece_json(const std::string& bytes) {
  if (utf8_valid(bytes)) return bytes;
  json out = json::array();
  for (char b : bytes) out.push_back(static_cast<unsigned char>(b));
  return out;
}

}  // namespace

// Two shapes: llama-server's {"content", "add_special" (default false), "parse_special" (default true),
// "with_pieces"} and vLLM's {"prompt", "add_special_tokens" (default true)}; both parse special-token text.
HttpResponse ApiRoutes::tokenize(const HttpRequest& req) const {
  try {
    const auto j = parse_body(req.body);
    if (!j.is_object()) throw bad_request("", "the body must be a JSON object");
    check_known_fields(j, "", {"content", "prompt", "add_special", "add_special_tokens", "parse_special", "with_pieces", "model"});
    if (j.contains("model") && !j["model"].is_null()) checked_model_name(api_context(), j);
    const bool vllm = !j.contains("content") && j.contains("prompt");
    const char* key = vllm ? "prompt" : "content";
    if (!j.contains(key) || !j[key].is_string())
      throw bad_request(key, fmt::format("'{}' must be a string", key));
    if (j.contains("add_special") && j.contains("add_special_tokens"))
      throw bad_request("add_special_tokens", "'add_special' and 'add_special_tokens' are the same switch: give one");
    const Fields f(j);
    const bool special = j.contains("add_special") ? f.boolean("add_special", false) : f.boolean("add_special_tokens", vllm);
    const bool parse_special = f.boolean("parse_special", true);
    const Tokenizer& tok = *engine_.engine().tokenizer;
    const auto ids = tok.encode(j[key].get<std::string>(), special, parse_special);
    json tokens = json::array();
    if (f.boolean("with_pieces", false)) {
      for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", piece_json(tok.token_to_piece(id, true))}});
    } else {
      tokens = ids;
    }
    return json_response(json_text({{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", engine_.n_ctx()}}));
  } catch (const ApiError& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response({400, std::string("bad /tokenize body: ") + e.what(), "", "invalid_request_error", ""});
  }
}

// vLLM's GET /tokenizer_info (what lm-eval-harness's remote tokenizer reads): the special tokens' text, the chat
// template, the context.
HttpResponse ApiRoutes::tokenizer_info() const {
  const Tokenizer& tok = *engine_.engine().tokenizer;
  const Vocab& v = tok.vocab();
  auto text_of = [&](int32_t id) { return id >= 0 ? json(tok.token_to_piece(id, true)) : json(nullptr); };
  return json_response(json_text({{"tokenizer_class", "kestrel"},
                                  {"bos_token", text_of(v.bos)},
                                  {"eos_token", text_of(v.eos)},
                                  {"pad_token", nullptr},
                                  {"add_bos_token", v.add_bos},
                                  {"add_eos_token", v.add_eos},
                                  {"chat_template", c_.chat_template ? json(c_.chat_template->source()) : json(nullptr)},
                                  {"model_max_length", engine_.n_ctx()}}));
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
  } catch (const nlohmann::json::exception& e) {  // a body of a shape no check above foresaw: still the client's
    return error_response(bad_request("", std::string("bad request body: ") + e.what()));
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
  } catch (const nlohmann::json::exception& e) {
    const ApiError bad = bad_request("", std::string("bad request body: ") + e.what());
    return api == Api::Messages ? anthropic_error_response(bad) : error_response(bad);
  }
}

HttpResponse ApiRoutes::detokenize(const HttpRequest& req) const {
  try {
    const auto j = parse_body(req.body);
    if (!j.is_object()) throw bad_request("", "the body must be a JSON object");
    check_known_fields(j, "", {"tokens", "model"});
    if (j.contains("model") && !j["model"].is_null()) checked_model_name(api_context(), j);
    const auto ids = j.at("tokens").get<std::vector<int32_t>>();
    const auto n = static_cast<int32_t>(engine_.engine().tokenizer->vocab().size());
    for (int32_t t : ids)
      if (t < 0 || t >= n) return error_response({400, "token id out of range", "tokens", "invalid_request_error", ""});
    // llama-server's name, and vLLM's.
    const std::string text = engine_.engine().tokenizer->decode(ids);
    return json_response(json_text({{"content", text}, {"prompt", text}}));
  } catch (const ApiError& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response({400, std::string("bad /detokenize body: ") + e.what(), "tokens", "invalid_request_error", ""});
  }
}

}  // namespace kestrel
