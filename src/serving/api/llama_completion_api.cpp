#include "serving/api/llama_completion_api.h"

#include <fmt/format.h>

#include <algorithm>

#include "serving/api/lora_api.h"
#include "serving/api/media_input.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

// The prompt's forms (llama-server's tokenize_input_subprompt): a string, token ids, or ids and strings mixed
// (each string tokenized with special tokens parsed; BOS before the first element when it is a string and the
// vocabulary adds one).
std::vector<int32_t> prompt_tokens(const ojson& pr, const ApiContext& ctx) {
  const Tokenizer& tok = ctx.tokenizer;
  const auto n_vocab = static_cast<int64_t>(tok.vocab().size());
  if (pr.is_string()) {
    const std::string& text = pr.get_ref<const std::string&>();
    check_prompt_bytes(ctx, text.size(), "prompt");
    return tok.encode(text, true, true);
  }
  std::vector<int32_t> out;
  for (size_t i = 0; i < pr.size(); i++) {
    const ojson& e = pr[i];
    const std::string param = fmt::format("prompt[{}]", i);
    if (e.is_string()) {
      check_prompt_bytes(ctx, e.get_ref<const std::string&>().size(), param);
      const std::vector<int32_t> ids = tok.encode(e.get<std::string>(), i == 0, true);
      out.insert(out.end(), ids.begin(), ids.end());
    } else if (e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() < n_vocab) {
      out.push_back(static_cast<int32_t>(e.get<int64_t>()));
    } else {
      throw bad_request(param, fmt::format("'{}' must be a token id from 0 to {} or a string", param, n_vocab - 1));
    }
  }
  return out;
}

}  // namespace

LlamaCompletionRequest llama_completion_ask(const ojson& body, const ApiContext& ctx) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  // cache_prompt: the prefix cache is always on (the answer is the same either way).
  check_known_fields(body, "",
                     {"model", "prompt", "n_predict", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed",
                      "stop", "stream", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
                      "priority", "ignore_eos", "grammar", "lora"},
                     {"cache_prompt"});
  LlamaCompletionRequest r;
  CompletionAsk& a = r.ask;
  a.model = checked_model_name(ctx, body);
  if (body.contains("lora") && !body["lora"].is_null()) a.lora = parse_lora_field(body["lora"], "lora");
  a.names.prompt = "prompt";
  // llama.cpp's sampling defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, the penalties over 64 tokens).
  a.sampling = SamplingParams{};
  if (!body.contains("prompt") || body["prompt"].is_null()) throw bad_request("prompt", "'prompt' is required");
  // One prompt (llama-server's tokenize_input_subprompt): a string, an object, or an array holding a number (ids, or
  // ids and strings mixed). An array of strings, objects or arrays is llama-server's several prompts: one here.
  auto is_prompts = [](const ojson& pr) {
    return pr.is_array() && std::none_of(pr.begin(), pr.end(), [](const ojson& e) { return e.is_number(); });
  };
  const ojson* one = &body["prompt"];
  std::string param = "prompt";
  if (is_prompts(*one)) {
    if (one->size() != 1)
      throw bad_request("prompt", one->empty() ? "'prompt' is empty"
                                               : "'prompt' holds several prompts: /completion takes one a request here "
                                                 "(send one request each, or use /v1/completions)");
    one = &(*one)[0];
    param = "prompt[0]";
  }
  const ojson& pr = *one;
  if (pr.is_object()) {
    std::vector<MediaPart> parts;
    std::string text = prompt_object(pr, param, ctx, parts);
    if (parts.empty()) {
      a.prompts = {prompt_tokens(ojson(text), ctx)};
    } else {
      a.media_text = std::move(text);
      a.media = std::move(parts);
      a.names.prompt = param;
    }
  } else if (pr.is_string() || (pr.is_array() && !is_prompts(pr))) {
    if (pr.is_string() && pr.get_ref<const std::string&>().empty()) throw bad_request(param, fmt::format("'{}' is empty", param));
    a.prompts = {prompt_tokens(pr, ctx)};
  } else {
    throw bad_request(param, fmt::format("'{}' must be a string, token ids, token ids and strings mixed, or an object "
                                         "{{\"prompt_string\", \"multimodal_data\"}}",
                                         param));
  }
  // n_predict: -1 (the default) until the end or the context.
  for (const char* key : {"n_predict", "max_tokens"})
    if (body.contains(key) && !body[key].is_null()) {
      if (!body[key].is_number_integer() || body[key].get<int64_t>() < -1)
        throw bad_request(key, fmt::format("'{}' must be -1 or a count of tokens", key));
      if (body[key].get<int64_t>() >= 0) a.max_tokens = body[key].get<int64_t>();
      a.names.max_tokens = key;
    }
  const Fields f(body);
  read_sampling(f, ctx, "repeat_penalty", a);
  if (body.contains("seed") && body["seed"].is_number_integer() && body["seed"].get<int64_t>() == -1)
    a.seed.reset();  // llama.cpp's -1: a random seed
  a.stop = f.strings("stop", kMaxStops);
  a.priority = static_cast<int>(f.integer("priority", -1000000, 1000000, 0));
  a.ignore_eos = f.boolean("ignore_eos", false);
  a.stream = f.boolean("stream", false);
  if (f.has("grammar")) a.structured["grammar"] = body["grammar"];
  if (a.media_text) {
    r.prompt_text = *a.media_text;
  } else {
    r.prompt_text = ctx.tokenizer.decode(a.prompts.front(), true);
  }
  return r;
}

}  // namespace kestrel
