#include "serving/api/completion_ask.h"

#include "mmproj/media_prompt.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string_view>
#include <utility>

#include "chat/reasoning.h"
#include "core/error.h"
#include "serving/api/structured_output.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

SamplingParams CompletionAsk::neutral_sampling() {
  SamplingParams s;
  s.temperature = 1.0f;
  s.top_k = 0;
  s.top_p = 1.0f;
  s.min_p = 0.0f;
  return s;
}

std::optional<double> Fields::number(const char* key, double lo, double hi) const {
  if (!has(key)) return std::nullopt;
  const std::string param = name(key);
  if (!o_[key].is_number()) throw bad_request(param, fmt::format("'{}' must be a number", param));
  const double v = o_[key].get<double>();
  if (!(v >= lo && v <= hi)) throw bad_request(param, fmt::format("'{}' = {} is out of range ({} to {})", param, v, lo, hi));
  return v;
}

std::optional<int64_t> Fields::integer(const char* key, int64_t lo, int64_t hi) const {
  if (!has(key)) return std::nullopt;
  const std::string param = name(key);
  if (!o_[key].is_number_integer()) throw bad_request(param, fmt::format("'{}' must be an integer", param));
  const auto v = o_[key].get<int64_t>();
  if (v < lo || v > hi) throw bad_request(param, fmt::format("'{}' = {} is out of range ({} to {})", param, v, lo, hi));
  return v;
}

std::optional<bool> Fields::boolean(const char* key) const {
  if (!has(key)) return std::nullopt;
  const std::string param = name(key);
  if (!o_[key].is_boolean()) throw bad_request(param, fmt::format("'{}' must be true or false", param));
  return o_[key].get<bool>();
}

std::vector<std::string> Fields::strings(const char* key, size_t max) const {
  if (!has(key)) return {};
  const std::string param = name(key);
  const ojson& s = o_[key];
  const std::string shape = fmt::format("'{}' must be a string or an array of up to {} strings", param, max);
  std::vector<std::string> out;
  if (s.is_string()) {
    out.push_back(s.get<std::string>());
  } else if (s.is_array() && s.size() <= max) {
    for (const auto& x : s) {
      if (!x.is_string()) throw bad_request(param, shape);
      out.push_back(x.get<std::string>());
    }
  } else {
    throw bad_request(param, shape);
  }
  for (const auto& x : out)
    if (x.empty()) throw bad_request(param, fmt::format("'{}' strings must not be empty", param));
  return out;
}

void read_sampling(const Fields& f, const ApiContext& ctx, const char* repeat_penalty_key, CompletionAsk& ask) {
  SamplingParams& s = ask.sampling;
  s.temperature = static_cast<float>(f.number("temperature", 0.0, 2.0, s.temperature));
  const double top_p = f.number("top_p", 0.0, 1.0, s.top_p);
  if (top_p == 0.0) throw bad_request(f.name("top_p"), fmt::format("'{}' must be greater than 0", f.name("top_p")));
  // A top_p too small for a float (5e-324) keeps the most likely token, as any tiny top_p does (schemathesis).
  s.top_p = std::max(static_cast<float>(top_p), std::numeric_limits<float>::denorm_min());
  s.top_k = static_cast<int>(f.integer("top_k", -1, 1 << 20, s.top_k));
  if (s.top_k < 0) s.top_k = 0;  // vLLM's -1: no limit
  s.min_p = static_cast<float>(f.number("min_p", 0.0, 1.0, s.min_p));
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2.0, 2.0, s.presence_penalty));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2.0, 2.0, s.frequency_penalty));
  s.repeat_penalty = static_cast<float>(f.number(repeat_penalty_key, 0.01, 10.0, s.repeat_penalty));
  // llama.cpp's window of the penalties: -1 the whole context, 0 none.
  const int64_t last_n = f.integer("repeat_last_n", -1, ctx.n_ctx, s.repeat_last_n);
  s.repeat_last_n = static_cast<int>(last_n < 0 ? ctx.n_ctx : last_n);
  if (const auto seed = f.integer("seed", INT64_MIN, INT64_MAX)) ask.seed = static_cast<uint64_t>(*seed);
}

namespace {

// Text with media at its markers: each file decoded (a 400 naming its part when it cannot be), the text around
// them tokenized by tokenize_piece, the files encoded on the engine thread, their rows in the prompt
// (mmproj/media_prompt.h). `param` names the prompt in errors.
void media_prompt(const ApiContext& ctx, const std::string& text, const std::string& marker, bool add_special,
                  const std::function<std::vector<int32_t>(std::string_view, size_t)>& tokenize_piece,
                  const std::vector<MediaPart>& parts, const std::string& param, RequestParams& params) {
  const MediaSupport& m = *ctx.media;
  std::vector<MediaInput> images;
  for (const MediaPart& part : parts) {
    MediaInput in;
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(part.bytes.data()), part.bytes.size());
    in.hash = media_hash(part.bytes.data(), part.bytes.size());
    if (part.audio) {
      try {
        AudioLimits limits;
        limits.max_bytes = m.max_audio_bytes;
        limits.max_seconds = m.max_audio_seconds;
        in.audio = true;
        in.samples = decode_audio(bytes, limits, part.param, m.audio->sample_rate());
      } catch (const Error& e) {
        throw bad_request(part.param, e.what());
      }
      images.push_back(std::move(in));
      continue;
    }
    try {
      ImageLimits limits;
      limits.max_bytes = m.max_bytes;
      limits.max_pixels = m.max_pixels;
      in.image = decode_image(bytes, limits, part.param);
    } catch (const Error& e) {
      throw bad_request(part.param, e.what());
    }
    // (Refused before any encoding: an image whose rows a step of this server could not take whole.)
    const int64_t rows = m.vision->n_tokens(in.image.width, in.image.height);
    if (m.vision->placement().non_causal && rows > m.max_span)
      throw bad_request(part.param, fmt::format("an image of {} tokens is attended as a whole, but a step of this "
                                                "server takes {} prompt tokens (--prefill-chunk)",
                                                rows, m.max_span));
    images.push_back(std::move(in));
  }
  MediaPromptOptions o;
  o.marker = marker;
  o.add_special = add_special;
  o.run_encoder = m.run_encoder;
  o.tokenize_piece = tokenize_piece;
  MediaPrompt mp;
  try {
    mp = build_media_prompt(ctx.tokenizer, {m.vision, m.audio}, text, images, o);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw bad_request(param, e.what());
  }
  if (m.on_encoded) m.on_encoded(static_cast<int64_t>(images.size()), mp.encoded, mp.media_tokens, mp.encode_seconds);
  params.prompt = std::move(mp.tokens);
  params.media = std::move(mp.media);
}

// The chat through the template: the prompt's tokens, and what the reply will be read for (reasoning, calls).
std::string render_chat(const ApiContext& ctx, const CompletionAsk& ask, ParsedRequest& p) {
  RequestParams& params = p.serve.params;
  const ChatPrompt prompt = render_chat_request(ctx, ask.chat_input);
  const RenderedChat& chat_text = prompt.rendered;
  const ReasoningTags tags = ctx.chat_template->reasoning_tags();
  p.reasoning_opened = prompt_opens_reasoning(chat_text.text, tags);
  // Reasoning tags that are control tokens (tekken's [THINK]) are written into the reply for the splitter.
  for (const std::string_view tag : {tags.open, tags.close})
    if (const int32_t id = ctx.tokenizer.vocab().find(std::string(tag)); id >= 0 && ctx.chat_template->reasons())
      params.shown_control.push_back(id);
  // Harmony (gpt-oss) replies are structured by channels whether or not tools were offered.
  if (prompt.tools_offered || ctx.tool_format == ToolCallFormat::Harmony) {
    p.tool_format = ctx.tool_format;
    // Markers that are control tokens of this vocabulary (Llama's <|python_tag|>, Mistral's
    // [TOOL_CALLS]) are written into the reply, or the parser could never see them.
    for (const auto marker : tool_call_markers(p.tool_format))
      if (const int32_t id = ctx.tokenizer.vocab().find(std::string(marker)); id >= 0) params.shown_control.push_back(id);
  }
  p.parallel_tool_calls = prompt.parallel_tool_calls;
  p.tool_grammar_held = !prompt.tool_grammar.empty();
  check_prompt_bytes(ctx, chat_text.text.size(), ask.names.prompt);
  if (prompt.media.empty()) {
    params.prompt = ctx.chat_template->tokenize(ctx.tokenizer, chat_text, ctx.allow_special_in_content);
  } else {
    auto piece = [&](std::string_view text, size_t offset) {
      if (ctx.allow_special_in_content) return ctx.tokenizer.encode(text, false, true);
      std::vector<TextSpan> plain;  // the message content inside this piece, from the piece's start
      for (const TextSpan& s : chat_text.content) {
        const size_t b = std::max(s.begin, offset), e = std::min(s.end, offset + text.size());
        if (b < e) plain.push_back({b - offset, e - offset});
      }
      return ctx.tokenizer.encode(text, false, plain);
    };
    media_prompt(ctx, chat_text.text, ctx.media->marker, !ctx.chat_template->bos_in_text(chat_text), piece, prompt.media,
                 "messages", params);
  }
  return prompt.tool_grammar;
}

// Anthropic's cache_control breakpoints as token counts of the prompt: a breakpoint inside the conversation is
// the common prefix of the prompt and the conversation up to it rendered without a generation prompt (a
// template that cannot render that prefix, even with a stand-in user turn after it, leaves the breakpoint out);
// the last message's is the whole prompt.
void cache_breakpoints(const ApiContext& ctx, const CompletionAsk& ask, ParsedRequest& p) {
  RequestParams& params = p.serve.params;
  const std::vector<int32_t>& prompt = params.prompt;
  const size_t n_messages = ask.chat_input["messages"].size();
  for (const CompletionAsk::CacheBreakpoint& b : ask.cache_breakpoints) {
    int64_t tokens = -1;
    if (b.messages >= n_messages) {
      tokens = static_cast<int64_t>(prompt.size());
    } else {
      nlohmann::ordered_json body = ask.chat_input;
      nlohmann::ordered_json& m = body["messages"];
      m.erase(m.begin() + static_cast<std::ptrdiff_t>(b.messages), m.end());
      // Templates that refuse a conversation without a user turn (or ending on one) get a stand-in user turn
      // after the prefix: the common prefix with the real prompt stops where the two differ.
      for (int attempt = 0; attempt < 2 && tokens < 0; attempt++) {
        if (attempt == 1) m.push_back({{"role", "user"}, {"content", "\x01"}});
        try {
          const std::vector<int32_t> prefix = ctx.chat_template->tokenize(
              ctx.tokenizer, render_chat_request(ctx, body, false).rendered, ctx.allow_special_in_content);
          tokens = static_cast<int64_t>(
              std::mismatch(prefix.begin(), prefix.end(), prompt.begin(), prompt.end()).first - prefix.begin());
        } catch (const ApiError&) {
        }
      }
    }
    if (tokens <= 0) continue;
    params.cache_pins.emplace_back(tokens, b.ttl_s);
    p.cache_breakpoint_tokens = std::max(p.cache_breakpoint_tokens, tokens);
  }
  std::sort(params.cache_pins.begin(), params.cache_pins.end());
}

// Each prompt and its generation within the context.
void fit_context(const ApiContext& ctx, const CompletionAsk& ask, ParsedRequest& p) {
  for (size_t i = 0; i < p.prompts.size(); i++) {
    ParsedRequest::Prompt& one = p.prompts[i];
    const std::string param = p.prompts.size() > 1 ? fmt::format("{}[{}]", ask.names.prompt, i) : ask.names.prompt;
    if (one.tokens.empty()) throw bad_request(param, fmt::format("'{}' gives no tokens", param));
    const auto n_prompt = static_cast<int64_t>(one.tokens.size());
    if (n_prompt >= ctx.n_ctx)
      throw ApiError{400,
                     fmt::format("the prompt has {} tokens but the context holds {} (with room for at least one more)",
                                 n_prompt, ctx.n_ctx),
                     param, "invalid_request_error", "context_length_exceeded"};
    const int64_t room = ctx.n_ctx - n_prompt;
    one.max_tokens = ask.max_tokens ? *ask.max_tokens : ask.chat || ask.until_context ? room : std::min<int64_t>(16, room);
    if (ask.max_tokens && *ask.max_tokens > room)
      throw ApiError{400,
                     fmt::format("the prompt{} ({} tokens) plus '{}' ({}) exceed the context of {} tokens",
                                 p.prompts.size() > 1 ? fmt::format(" {}", i) : "", n_prompt, ask.names.max_tokens,
                                 *ask.max_tokens, ctx.n_ctx),
                     ask.names.max_tokens, "invalid_request_error", "context_length_exceeded"};
  }
}

// At most this many tokens of reasoning: then the template's close tag is generated and the answer follows.
void reasoning_budget(const ApiContext& ctx, const CompletionAsk& ask, ParsedRequest& p) {
  RequestParams& params = p.serve.params;
  const std::string& param = ask.names.reasoning_budget;
  params.reasoning_budget = *ask.reasoning_budget;
  if (!ctx.chat_template->reasons())
    throw bad_request(param, fmt::format("this model's chat template writes no reasoning: '{}' would change nothing", param));
  if (p.serve.grammar)
    throw bad_request(param, fmt::format("'{}' with a grammar (response_format, grammar, a required tool call) is not "
                                         "supported: the closing tag could break the grammar",
                                         param));
  const ReasoningTags tags = ctx.chat_template->reasoning_tags();
  params.reasoning_open = ctx.tokenizer.encode(std::string(tags.open), false, true);
  params.reasoning_close = ctx.tokenizer.encode(std::string(tags.close), false, true);
  params.reasoning_opened = p.reasoning_opened;
  if (params.reasoning_close.empty() || params.reasoning_open.empty())
    throw bad_request(param, "the reasoning tags of this template give no tokens");
}

}  // namespace

ParsedRequest prepare_completion(const ApiContext& ctx, CompletionAsk ask) {
  if (ask.names.prompt.empty()) ask.names.prompt = ask.chat ? "messages" : "prompt";
  ParsedRequest p;
  p.chat = ask.chat;
  p.model = ask.model;
  p.lora = ask.lora;
  ServeRequest& r = p.serve;
  std::string tool_grammar;
  if (ask.chat) {
    tool_grammar = render_chat(ctx, ask, p);
    if (!ask.cache_breakpoints.empty()) cache_breakpoints(ctx, ask, p);
    p.prompts.push_back({r.params.prompt, 0});
  } else if (ask.media_text) {
    // llama-server's prompt with multimodal_data: its markers are llama.cpp's `<__media__>` (as its documentation
    // says) or this server's own (as GET /props says, as llama-server's /props does); special tokens parsed.
    if (!ctx.media) throw bad_request(ask.names.prompt, "this server has no multimodal projector (--mmproj)");
    const std::string& text = *ask.media_text;
    check_prompt_bytes(ctx, text.size(), ask.names.prompt);
    const std::string marker = text.find(ctx.media->marker) != std::string::npos ? ctx.media->marker : std::string(kMediaMarker);
    size_t markers = 0;
    for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + marker.size())) markers++;
    if (markers != ask.media.size())
      throw bad_request(ask.names.prompt + ".prompt_string",
                        fmt::format("'{0}.prompt_string' has {1} media markers ({2}) for {3} files in "
                                    "'{0}.multimodal_data': one marker a file, in order",
                                    ask.names.prompt, markers, kMediaMarker, ask.media.size()));
    auto piece = [&](std::string_view t, size_t) { return ctx.tokenizer.encode(t, false, true); };
    media_prompt(ctx, text, marker, true, piece, ask.media, ask.names.prompt, r.params);
    p.prompts.push_back({r.params.prompt, 0});
  } else {
    if (ask.prompts.empty()) throw bad_request(ask.names.prompt, fmt::format("'{}' is missing", ask.names.prompt));
    for (auto& tokens : ask.prompts) p.prompts.push_back({std::move(tokens), 0});
    r.params.prompt = p.prompts.front().tokens;
  }
  fit_context(ctx, ask, p);
  r.params.max_tokens = p.prompts.front().max_tokens;
  r.params.sampling = std::move(ask.sampling);
  r.params.sampling.seed = ask.seed ? *ask.seed : std::random_device{}();
  p.n = ask.n;
  r.params.stop = std::move(ask.stop);
  r.params.priority = ask.priority;
  r.params.ignore_eos = ask.ignore_eos;
  r.grammar = requested_grammar(ask.structured, tool_grammar);
  if (ask.chat && ask.reasoning_budget) reasoning_budget(ctx, ask, p);
  r.params.top_logprobs = ask.top_logprobs;
  r.params.logprob_end_token = ask.logprob_end_token;
  r.echo = ask.echo;
  if (r.echo) r.prompt_logprobs = r.params.top_logprobs;
  p.stream = ask.stream;
  p.include_usage_chunk = ask.include_usage_chunk;
  p.token_ids_in_logprobs = ask.token_ids_in_logprobs;
  try {
    r.params.sampling.validate();
  } catch (const Error& e) {
    throw bad_request("", e.what());
  }
  return p;
}

}  // namespace kestrel
