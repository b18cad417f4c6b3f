#include "serving/api/infill_api.h"

#include <fmt/format.h>

#include <set>

namespace kestrel {

using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

namespace {

std::string string_field(const ojson& body, const char* key, bool required) {
  if (!body.contains(key) || body[key].is_null()) {
    if (required) throw bad_request(key, fmt::format("'{}' is required", key));
    return "";
  }
  if (!body[key].is_string()) throw bad_request(key, fmt::format("'{}' must be a string", key));
  return body[key];
}

}  // namespace

InfillRequest infill_ask(const ojson& body, const ApiContext& ctx) {
  if (!body.is_object()) throw bad_request("", "the body must be a JSON object");
  // cache_prompt: the prefix cache is always on (the answer is the same either way).
  check_known_fields(body, "",
                     {"model", "input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "max_tokens",
                      "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream", "repeat_penalty",
                      "repeat_last_n", "presence_penalty", "frequency_penalty", "priority"},
                     {"cache_prompt"});
  const Vocab& v = ctx.tokenizer.vocab();
  std::string missing;
  if (v.fim_pre < 0) missing += " prefix";
  if (v.fim_suf < 0) missing += " suffix";
  if (v.fim_mid < 0) missing += " middle";
  if (!missing.empty())
    throw bad_request("",
                      fmt::format("this model has no fill-in-the-middle tokens (missing:{}; tokenizer.ggml.fim_pre/suf/"
                                  "mid_token_id or their usual spellings): /infill needs a code model made for it",
                                  missing));
  const Tokenizer& tok = ctx.tokenizer;
  auto encode = [&](const std::string& s) { return tok.encode(s, false, false); };
  const std::string prefix = string_field(body, "input_prefix", true), suffix = string_field(body, "input_suffix", true);
  const std::string typed = string_field(body, "prompt", false);

  // The extra context: [FIM_REP]myproject\n, then each chunk after [FIM_SEP]filename\n (or a snippet separator).
  std::vector<int32_t> extra;
  if (v.fim_rep >= 0) {
    extra.push_back(v.fim_rep);
    for (int32_t t : encode("myproject\n")) extra.push_back(t);
  }
  if (body.contains("input_extra") && !body["input_extra"].is_null()) {
    const ojson& chunks = body["input_extra"];
    if (!chunks.is_array())
      throw bad_request("input_extra", "'input_extra' must be an array of {\"filename\", \"text\"}");
    for (size_t i = 0; i < chunks.size(); i++) {
      const std::string cp = fmt::format("input_extra[{}]", i);
      const ojson& c = chunks[i];
      if (!c.is_object()) throw bad_request(cp, fmt::format("'{}' must be an object", cp));
      check_known_fields(c, cp, {"filename", "text"});
      if (!c.contains("text") || !c["text"].is_string())
        throw bad_request(cp + ".text", fmt::format("'{}.text' must be a string", cp));
      if (c.contains("filename") && !c["filename"].is_string())
        throw bad_request(cp + ".filename", fmt::format("'{}.filename' must be a string", cp));
      std::vector<int32_t> head;
      if (v.fim_sep >= 0) {
        head.push_back(v.fim_sep);
        for (int32_t t : encode(c.value("filename", std::string("tmp")) + "\n")) head.push_back(t);
      } else {
        head = encode("\n\n--- snippet ---\n\n");
      }
      extra.insert(extra.end(), head.begin(), head.end());
      for (int32_t t : encode(c["text"])) extra.push_back(t);
    }
  }
  if (v.fim_sep >= 0) {
    extra.push_back(v.fim_sep);
    for (int32_t t : encode("filename\n")) extra.push_back(t);
  }

  // [BOS]<PRE>prefix prompt<SUF>suffix<MID>
  std::vector<int32_t> core;
  if (v.add_bos) core.push_back(v.bos);
  core.push_back(v.fim_pre);
  for (int32_t t : encode(prefix)) core.push_back(t);
  for (int32_t t : encode(typed)) core.push_back(t);
  core.push_back(v.fim_suf);
  for (int32_t t : encode(suffix)) core.push_back(t);
  core.push_back(v.fim_mid);

  InfillRequest r;
  CompletionAsk& a = r.ask;
  a.model = checked_model_name(ctx, body);
  // n_predict: -1 (the default) until the end or the context.
  int64_t max_tokens = -1;
  for (const char* key : {"n_predict", "max_tokens"})
    if (body.contains(key) && !body[key].is_null()) {
      if (!body[key].is_number_integer() || body[key].get<int64_t>() < -1)
        throw bad_request(key, fmt::format("'{}' must be -1 or a count of tokens", key));
      max_tokens = body[key];
      a.names.max_tokens = key;
    }
  const auto n_core = static_cast<int64_t>(core.size());
  if (n_core >= ctx.n_ctx)
    throw ApiError{400,
                   fmt::format("the prefix, suffix and prompt take {} tokens but the context holds {}", n_core, ctx.n_ctx),
                   "input_prefix", "invalid_request_error", "context_length_exceeded"};
  const int64_t room = ctx.n_ctx - n_core;
  if (max_tokens > room)
    throw ApiError{400, fmt::format("the prompt ({} tokens) plus '{}' ({}) exceed the context of {} tokens", n_core,
                                    a.names.max_tokens, max_tokens, ctx.n_ctx),
                   a.names.max_tokens, "invalid_request_error", "context_length_exceeded"};
  // The extra context fills what the generation leaves (its newest tokens kept).
  const int64_t gen = max_tokens < 0 ? std::min<int64_t>(room - 1, 256) : max_tokens;
  const int64_t extra_room = std::max<int64_t>(0, room - gen - 1);
  const auto n_extra = static_cast<int64_t>(extra.size());
  r.extra_dropped = std::max<int64_t>(0, n_extra - extra_room);
  std::vector<int32_t> prompt(extra.begin() + r.extra_dropped, extra.end());
  prompt.insert(prompt.end(), core.begin(), core.end());
  a.prompts = {prompt};
  a.names.prompt = "input_prefix";
  a.max_tokens = max_tokens < 0 ? ctx.n_ctx - static_cast<int64_t>(prompt.size()) : max_tokens;
  const Fields f(body);
  read_sampling(f, ctx, "repeat_penalty", a);
  a.stop = f.strings("stop", kMaxStops);
  a.priority = static_cast<int>(f.integer("priority", -1000000, 1000000, 0));
  a.stream = f.boolean("stream", false);
  r.prompt_text = tok.decode(prompt, true);
  return r;
}

json InfillAnswer::final_object() const {
  // Why it stopped, as llama-server says: eos (the model ended), word (a stop string), limit (n_predict).
  const std::string stop_type = finish_ == "length" ? "limit" : stop_word_.empty() ? "eos" : "word";
  const ReplyUsage u = usage();
  json o = {{"content", stream_ ? "" : content_},
            {"stop", true},
            {"model", ids_.model},
            {"prompt", ids_.prompt_text},
            {"tokens_predicted", u.completion},
            {"tokens_evaluated", u.prompt},
            {"tokens_cached", u.cached},
            {"stop_type", stop_type},
            {"stopping_word", stop_word_},
            {"truncated", false},
            {"has_new_line", content_.find('\n') != std::string::npos}};
  if (ids_.extra_dropped >= 0) o["input_extra_tokens_dropped"] = ids_.extra_dropped;  // /infill's
  return o;
}

void InfillAnswer::on_error(std::string& out) {
  if (stream_) out += "data: " + json_text({{"error", {{"code", 500}, {"message", error_}, {"type", "server_error"}}}}) + "\n\n";
}

void InfillAnswer::on_event(const ReplyEvent& e, std::string& out) {
  const std::string& text = e.part.content;
  if (e.end()) {
    finish_ = e.engine.finish_reason;
    stop_word_ = e.engine.stop_string;
  }
  content_ += text;
  if (stream_ && !text.empty()) out += "data: " + json_text({{"content", text}, {"stop", false}}) + "\n\n";
}

void InfillAnswer::on_done(std::string& out) {
  if (stream_ && error_.empty()) out += "data: " + json_text(final_object()) + "\n\n";
}

std::optional<HttpResponse> InfillAnswer::poll() {
  std::string unused;
  return whole(read(unused), [&] { return json_text(final_object()); }, error_response);
}

}  // namespace kestrel
