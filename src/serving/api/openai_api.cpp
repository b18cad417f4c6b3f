#include "serving/api/openai_api.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "serving/api/lora_api.h"
#include "core/error.h"
#include "serving/api/completion_ask.h"
#include "serving/api/media_input.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

// Ordered: the order of keys a client sent (tool parameters, message fields)
// is the order a chat template renders them in, as transformers does.

// {"token id": bias}: ids of this vocabulary, biases -100 to 100, at most 1024 entries.
std::vector<std::pair<int32_t, float>> logit_bias(const ojson& j, int64_t n_vocab) {
  if (!j.contains("logit_bias") || j["logit_bias"].is_null()) return {};
  const ojson& b = j["logit_bias"];
  if (!b.is_object()) throw bad_request("logit_bias", "'logit_bias' must be an object of {\"token id\": bias}");
  if (b.size() > 1024) throw bad_request("logit_bias", "'logit_bias' holds more than 1024 tokens");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : b.items()) {
    const std::string param = "logit_bias." + key;
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id >= n_vocab)
      throw bad_request(
          param, fmt::format("'logit_bias' key '{}' is not a token id of this model (0 to {})", key, n_vocab - 1));
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100)
      throw bad_request(param, fmt::format("'{}' must be a number from -100 to 100", param));
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return out;
}

// A completions `prompt` holds at most this many prompts.
constexpr size_t kMaxPrompts = 1024;

}  // namespace

// A text too long for the context is refused before it is tokenized (a
// 4 MiB prompt took 1.5 s of CPU to tokenize only to be refused).
void check_prompt_bytes(const ApiContext& ctx, size_t bytes, const std::string& param) {
  const size_t per_token = ctx.tokenizer.max_token_text_bytes();
  const auto at_least = static_cast<int64_t>((bytes + per_token - 1) / per_token);
  if (at_least >= ctx.n_ctx)
    throw ApiError{400,
                   fmt::format("the prompt has {} bytes, so at least {} tokens (no token of this vocabulary stands for "
                               "more than {} bytes), but the context holds {}",
                               bytes, at_least, per_token, ctx.n_ctx),
                   param, "invalid_request_error", "context_length_exceeded"};
}

// Every field of a body is one we implement, or one that cannot change the
// output (`user`); anything else is a 400 naming it rather than an answer
// computed without it. OpenAI fields we know but do not implement say so.
void check_request_fields(const ojson& j, bool chat) {
  static const std::set<std::string> common = {
      "model",  "max_tokens",         "temperature", "top_p",  "top_k",          "min_p",      "presence_penalty",
      "frequency_penalty", "repetition_penalty", "seed", "n", "stop", "priority", "ignore_eos", "stream",
      "stream_options", "logprobs", "user", "logit_bias", "return_tokens_as_token_ids", "response_format", "grammar",
      "repeat_last_n", "lora"};
  static const std::set<std::string> chat_only = {"messages", "max_completion_tokens", "top_logprobs",
                                                  "chat_template_kwargs", "tools", "tool_choice",
                                                  "parallel_tool_calls", "reasoning_effort", "reasoning_budget"};
  static const std::set<std::string> completion_only = {"prompt", "echo", "best_of"};
  static const std::set<std::string> openai_unimplemented = {
      "functions", "function_call", "suffix", "audio", "modalities", "prediction", "reasoning_effort", "web_search_options"};
  for (const auto& [key, value] : j.items()) {
    if (common.count(key) || (chat ? chat_only : completion_only).count(key)) continue;
    if (value.is_null()) continue;  // an explicit null asks for the default
    if (openai_unimplemented.count(key))
      throw bad_request(key, fmt::format("'{}' is not supported by this server", key));
    throw bad_request(key, fmt::format("unknown field '{}'", key));
  }
  if (const auto it = j.find("stream_options"); it != j.end() && it->is_object())
    for (const auto& [key, value] : it->items())
      if (key != "include_usage")
        throw bad_request("stream_options." + key, fmt::format("unknown field 'stream_options.{}'", key));
}

std::string string_or_empty(const ojson& o, const char* key) {
  if (!o.is_object()) return "";
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void check_known_fields(const ojson& o, const std::string& where, const std::set<std::string>& known,
                        const std::set<std::string>& ignored) {
  for (const auto& [key, value] : o.items()) {
    if (known.count(key) || ignored.count(key) || value.is_null()) continue;
    const std::string param = where.empty() ? key : where + "." + key;
    throw bad_request(param, fmt::format("unknown field '{}'", param));
  }
}

std::vector<std::vector<int32_t>> token_prompts(const ApiContext& ctx, const ojson& j, const std::string& key,
                                                size_t max_items, bool check_bytes) {
  if (!j.contains(key) || j[key].is_null()) throw bad_request(key, fmt::format("'{}' is missing", key));
  const ojson& pr = j[key];
  const auto n_vocab = static_cast<int64_t>(ctx.tokenizer.vocab().size());
  const std::string shape = fmt::format(
      "'{}' must be a string, an array of strings, an array of token ids or an array of arrays of token ids", key);
  auto text = [&](const ojson& t, const std::string& param) {
    if (t.get_ref<const std::string&>().empty()) throw bad_request(param, fmt::format("'{}' is empty", param));
    if (check_bytes) check_prompt_bytes(ctx, t.get_ref<const std::string&>().size(), param);
    return ctx.tokenizer.encode(t.get<std::string>(), true, false);
  };
  auto ids = [&](const ojson& a, const std::string& param) {
    std::vector<int32_t> out;
    for (const auto& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
        throw bad_request(param, fmt::format("'{}' token ids must be integers from 0 to {}", param, n_vocab - 1));
      out.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    if (out.empty()) throw bad_request(param, fmt::format("'{}' is empty", param));
    return out;
  };
  if (pr.is_string()) return {text(pr, key)};
  if (!pr.is_array() || pr.empty()) throw bad_request(key, shape);
  if (pr[0].is_number()) return {ids(pr, key)};
  if (pr.size() > max_items)
    throw bad_request(key, fmt::format("'{}' holds {} items; at most {} in one request", key, pr.size(), max_items));
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < pr.size(); i++) {
    const std::string param = pr.size() > 1 ? fmt::format("{}[{}]", key, i) : key;
    if (pr[i].is_string())
      out.push_back(text(pr[i], param));
    else if (pr[i].is_array())
      out.push_back(ids(pr[i], param));
    else
      throw bad_request(param, shape);
  }
  return out;
}

std::string checked_model_name(const ApiContext& ctx, const nlohmann::ordered_json& body) {
  if (!body.contains("model") || body["model"].is_null()) return ctx.model_names.front();
  if (!body["model"].is_string()) throw bad_request("model", "'model' must be a string");
  const std::string name = body["model"].get<std::string>();
  if (std::find(ctx.model_names.begin(), ctx.model_names.end(), name) == ctx.model_names.end())
    throw ApiError{404, model_not_found_message(name, ctx.model_names), "model", "invalid_request_error", "model_not_found"};
  return name;
}

std::string model_not_found_message(const std::string& name, const std::vector<std::string>& served) {
  return fmt::format("the model '{}' does not exist (this server serves '{}')", name, fmt::join(served, "', '"));
}

std::string api_error_body(const ApiError& e) {
  ojson err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json_text(ojson{{"error", err}});
}

HttpResponse error_response(const ApiError& e) { return json_response(api_error_body(e), e.status); }

HttpResponse internal_error_response(const std::exception& e) {
  return error_response({500, std::string("internal error: ") + e.what(), "", "server_error", ""});
}

std::string json_text(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

nlohmann::ordered_json parse_body(const std::string& body) {
  int64_t values = 0;
  const ojson::parser_callback_t bounds = [&](int depth, ojson::parse_event_t event, ojson&) {
    if (depth >= kMaxJsonDepth)  // depth counts from 0: the outermost value is level 1
      throw bad_request("", fmt::format("the body nests JSON deeper than {} levels", kMaxJsonDepth));
    if ((event == ojson::parse_event_t::value || event == ojson::parse_event_t::object_start ||
         event == ojson::parse_event_t::array_start) &&
        ++values > kMaxJsonValues)
      throw bad_request("", fmt::format("the body holds more than {} JSON values", kMaxJsonValues));
    return true;
  };
  try {
    return ojson::parse(body, bounds);
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw bad_request("", fmt::format("the body is not valid JSON: {}", e.what()));
  }
}

// More choices than a step's batch would hold gain nothing; 16 is the default --max-batch-size.
constexpr int64_t kMaxChoices = 16;

ParsedRequest parse_completion_request(const ApiContext& ctx, const std::string& body, bool chat) {
  return prepare_completion(ctx, openai_ask(ctx, parse_body(body), chat));
}

CompletionAsk openai_ask(const ApiContext& ctx, const ojson& j, bool chat) {
  if (!j.is_object()) throw bad_request("", "the body must be a JSON object");
  check_request_fields(j, chat);
  const Fields f(j);
  CompletionAsk ask;
  ask.chat = chat;
  ask.model = checked_model_name(ctx, j);
  if (j.contains("lora") && !j["lora"].is_null()) ask.lora = parse_lora_field(j["lora"], "lora");
  if (chat) {
    for (const char* key : {"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                            "reasoning_effort"})
      if (j.contains(key)) ask.chat_input[key] = j[key];
  } else if (j.contains("prompt") && j["prompt"].is_object()) {
    // llama-server's prompt object, with its files (multimodal_data) where the text has the media marker.
    std::string text = prompt_object(j["prompt"], "prompt", ctx, ask.media);
    if (ask.media.empty()) {
      ask.prompts = token_prompts(ctx, ojson{{"prompt", text}}, "prompt", kMaxPrompts, true);
    } else {
      ask.media_text = std::move(text);
    }
  } else {
    ask.prompts = token_prompts(ctx, j, "prompt", kMaxPrompts, true);
  }
  ask.names.max_tokens = chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  // 0 (completions): no generation, the prompt scored (echo with logprobs) as evaluation harnesses do.
  ask.max_tokens = f.integer(ask.names.max_tokens.c_str(), chat ? 1 : 0, int64_t{1} << 30);

  read_sampling(f, ctx, "repetition_penalty", ask);
  ask.n = static_cast<int>(f.integer("n", 1, kMaxChoices, 1));
  // best_of candidates, of which the n best are returned: only best_of = n (every one returned) is honest here.
  if (!chat && f.integer("best_of", 1, 1 << 10, ask.n) != ask.n)
    throw bad_request("best_of", "'best_of' greater than 'n' is not supported (each generated sequence is returned)");
  ask.sampling.logit_bias = logit_bias(j, static_cast<int64_t>(ctx.tokenizer.vocab().size()));
  ask.stop = f.strings("stop", kMaxStops);
  ask.priority = static_cast<int>(f.integer("priority", -1000000, 1000000, 0));
  ask.ignore_eos = f.boolean("ignore_eos", false);
  for (const char* key : {"response_format", "grammar"})
    if (j.contains(key)) ask.structured[key] = j[key];
  if (chat) ask.reasoning_budget = f.integer("reasoning_budget", 0, int64_t{1} << 30);
  if (chat) {
    if (f.boolean("logprobs", false))
      ask.top_logprobs = static_cast<int>(f.integer("top_logprobs", 0, 20, 0));
    else if (f.has("top_logprobs"))
      throw bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else {
    ask.top_logprobs = static_cast<int>(f.integer("logprobs", 0, 20, -1));
    ask.echo = f.boolean("echo", false);
    if (ask.echo && ask.media_text)
      throw bad_request("echo", "'echo' with a prompt holding media is not supported (its rows have no text to echo)");
    ask.logprob_end_token = ask.top_logprobs >= 0;
  }
  ask.stream = f.boolean("stream", false);
  ask.token_ids_in_logprobs = f.boolean("return_tokens_as_token_ids", false);
  if (f.has("stream_options")) {
    if (!j["stream_options"].is_object()) throw bad_request("stream_options", "'stream_options' must be an object");
    ask.include_usage_chunk = Fields(j["stream_options"], "stream_options.").boolean("include_usage", false);
  }
  return ask;
}

}  // namespace kestrel
