// POST /v1/completions and /v1/chat/completions: admission (draining, a
// full queue) at once, then, offloaded, parsing and submission to the
// engine, then the whole answer or a stream of server-sent events.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/api/anthropic_api.h"
#include "serving/api/api_routes.h"
#include "serving/api/completion_ask.h"
#include "serving/api/completion_body.h"
#include "serving/api/completion_stream.h"
#include "serving/api/completion_whole.h"
#include "serving/api/embeddings_api.h"
#include "gguf/gguf.h"
#include "serving/api/ollama_api.h"
#include "serving/http/offload.h"
#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
// An answer streamed as it comes, or whole once it ends.
template <class Answer>
void answer_with(HttpResponse& r, std::shared_ptr<Answer> answer, bool stream,
                 const char* content_type = "text/event-stream") {
  if (stream) {
    r.content_type = content_type;
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.stream = std::move(answer);
  } else {
    r.content_type = "application/json";
    r.later = std::move(answer);
  }
}
}  // namespace

// A request refused before it ran: counted, and logged with the reason the client was given (in its API's shape).
HttpResponse ApiRoutes::rejected(const ApiError& e, Api api) {
  metrics_.add("kestrel_requests_total", 1, "rejected");
  {
    std::lock_guard lock(log_mutex_);
    if (c_.log_json)
      fmt::print(stderr, "{}\n",
                 json_text({{"rejected", true}, {"status", e.status}, {"param", e.param}, {"code", e.code}, {"message", e.message}}));
    else
      fmt::print(stderr, "[kestrel] request rejected ({}{}{}): {}\n", e.status, e.param.empty() ? "" : ", ", e.param,
                 e.message);
  }
  return error_for(e, api);
}

HttpResponse ApiRoutes::error_for(const ApiError& e, Api api) {
  switch (api) {
    case Api::Messages: return anthropic_error_response(e);
    case Api::OllamaChat:
    case Api::OllamaGenerate:
    case Api::OllamaEmbed: return ollama_error_response(e);
    default: return error_response(e);
  }
}

std::optional<HttpResponse> ApiRoutes::more_slots(QueueSlot first, size_t total, std::vector<QueueSlot>& slots, Api api,
                                                  const std::string& param, const std::string& what) {
  if (total > static_cast<size_t>(engine_.max_queue()))
    return rejected(bad_request(param, fmt::format("{} are more requests than the queue holds ({}, --max-queue)", what,
                                                   engine_.max_queue())),
                    api);
  slots.push_back(std::move(first));
  while (slots.size() < total) {
    QueueSlot more = engine_.enter_queue();
    if (!more) {
      HttpResponse r = rejected({503, fmt::format("the request queue has no room for {} requests; retry shortly", total),
                                 "", "server_error", "queue_full"},
                                api);
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    slots.push_back(std::move(more));
  }
  return std::nullopt;
}

// On the transport's thread: only what is instant (draining, a place in
// the queue, a small body's parsing); a larger body is parsed and tokenized
// offloaded.
HttpResponse ApiRoutes::completion(const HttpRequest& req, Api api) {
  metrics_.add("kestrel_api_requests_total", 1, req.path);
  const auto trace = RequestTrace::start(c_.tracer.get(), req);
  if (draining_) {
    HttpResponse r = rejected({503, "the server is shutting down", "", "server_error", "unavailable"}, api);
    r.headers.emplace_back("Retry-After", "5");
    if (trace) trace->refused(operation_of(api), r.status, std::to_string(r.status), "the server is shutting down");
    return r;
  }
  QueueSlot slot = engine_.enter_queue();
  if (!slot) {
    HttpResponse r = rejected({503, fmt::format("the request queue is full ({} waiting); retry shortly",
                                                engine_.queued()),
                               "", "server_error", "queue_full"},
                               api);
    r.headers.emplace_back("Retry-After", "1");
    if (trace) trace->refused(operation_of(api), r.status, std::to_string(r.status), "the request queue is full");
    return r;
  }
  // (A body that may carry images or audio is always offloaded: its media are encoded before it starts.)
  const bool media = c_.mmproj && (req.body.find("image") != std::string::npos ||
                                   req.body.find("audio") != std::string::npos ||
                                   req.body.find("multimodal_data") != std::string::npos);
  if (req.body.size() <= kInlineBodyBytes && !media)
    return traced_start(req, api, std::move(slot), trace);
  // (std::function wants a copyable job: the slot rides in a shared_ptr.)
  auto held = std::make_shared<QueueSlot>(std::move(slot));
  return OffloadedResponse::start(offload_, [this, req, api, held, trace] {
    return traced_start(req, api, std::move(*held), trace);
  });
}

const char* ApiRoutes::operation_of(Api api) {
  switch (api) {
    case Api::Chat:
    case Api::Messages:
    case Api::OllamaChat:
    case Api::Responses: return "chat";
    case Api::Embeddings:
    case Api::OllamaEmbed: return "embeddings";
    case Api::Rerank: return "rerank";
    default: return "text_completion";
  }
}

HttpResponse ApiRoutes::traced_start(const HttpRequest& req, Api api, QueueSlot slot,
                                     const std::shared_ptr<RequestTrace>& trace) {
  const bool embed = api == Api::Embeddings || api == Api::OllamaEmbed || api == Api::Rerank;
  HttpResponse r = embed ? start_embeddings(req, api, std::move(slot), trace) : start_completion(req, api, std::move(slot), trace);
  if (trace && r.status >= 400 && !r.stream && !r.later) {  // refused before it ran: the message the client got
    std::string message = r.body.substr(0, 512);
    const json body = json::parse(r.body, nullptr, false);
    if (body.is_object() && body.contains("error")) {
      const json& e = body["error"];
      if (e.is_string()) message = e.get<std::string>();  // Ollama's shape
      else if (e.is_object() && e.contains("message") && e["message"].is_string()) message = e["message"].get<std::string>();
    }
    trace->refused(operation_of(api), r.status, std::to_string(r.status), message);
  }
  return r;
}

// Each input one request that runs its prefill and sends its pooled vector.
HttpResponse ApiRoutes::start_embeddings(const HttpRequest& req, Api api, QueueSlot slot,
                                        const std::shared_ptr<RequestTrace>& trace) {
  const bool ollama = api == Api::OllamaEmbed;
  const ModelConfig& mc = engine_.engine().model->config();
  const int pooling = c_.pooling >= 0 ? c_.pooling : mc.pooling_type;
  if (api == Api::Rerank && (pooling != 4 || mc.classifier_labels.empty()))
    return rejected(bad_request("model", pooling != 4 ? fmt::format("this model is not a reranker ({}.pooling_type is not "
                                                                    "rank)",
                                                                    mc.arch)
                                                      : "this reranker has no classification head (cls.output.weight)"),
                    api);
  if (api != Api::Rerank && (pooling <= 0 || pooling == 4))
    return rejected(bad_request("model", pooling == 4 ? fmt::format("this is a reranking model ({}.pooling_type rank): it "
                                                                     "scores pairs, it does not embed",
                                                                     mc.arch)
                                                      : fmt::format("this model declares no pooling ({}.pooling_type {}): "
                                                                    "start the server with --pooling mean|cls|last to "
                                                                    "embed with it",
                                                                    mc.arch, pooling < 0 ? "absent" : "none")),
                    api);
  EmbeddingRequest er;
  try {
    if (api == Api::Rerank) {
      const auto tmpl = engine_.engine().file ? engine_.engine().file->get_string("tokenizer.chat_template.rerank") : std::nullopt;
      er = parse_rerank_request(api_context(), parse_body(req.body), tmpl.value_or(""));
    } else {
      er = parse_embedding_request(api_context(), parse_body(req.body), ollama, engine_.engine().model->hidden_dim(),
                                   c_.matryoshka);
    }
  } catch (const ApiError& e) {
    return rejected(e, api);
  }
  std::vector<QueueSlot> slots;
  if (auto refused = more_slots(std::move(slot), er.inputs.size(), slots, api, er.rerank ? "documents" : "input",
                                fmt::format("{} inputs", er.inputs.size())))
    return *refused;
  std::vector<std::shared_ptr<RequestChannel>> chs;
  try {
    for (size_t i = 0; i < er.inputs.size(); i++) {
      ServeRequest one;
      one.arrival = req.arrival;
      one.params.prompt = er.inputs[i];
      one.params.max_tokens = 0;
      one.pooling = pooling;
      one.operation = er.rerank ? "rerank" : "embeddings";
      one.model = er.model;
      if (c_.lora) one.params.lora = c_.lora->set_for(er.model, std::nullopt);
      chs.push_back(engine_.submit(std::move(slots[i]), std::move(one)));
    }
  } catch (const Error& e) {
    for (auto& c : chs) c->cancel();
    return rejected({400, e.what(), "input", "invalid_request_error", "context_length_exceeded"}, api);
  }
  std::function<void(const StreamEvent&)> on_end;
  if (trace) {
    RequestTrace::Ask ask{operation_of(api), er.model.empty() ? c_.model_names.front() : er.model, c_.model_names.front()};
    trace->accepted(std::move(ask), 1, "");
    on_end = [trace](const StreamEvent& end) { trace->choice_ended(end); };
  }
  HttpResponse r;
  r.later = std::make_shared<EmbeddingsAnswer>(std::move(chs), std::move(er), req.arrival, std::move(on_end));
  return r;
}

ApiContext ApiRoutes::api_context() const {
  return {*engine_.engine().tokenizer, c_.model_names, c_.chat_template.get(), engine_.n_ctx(),
          c_.allow_special_in_content, c_.tool_format, c_.mmproj ? &c_.media : nullptr};
}

// The body as a completion ask, read by its own API's reader, and prepared.
ApiRoutes::Prepared ApiRoutes::parse(const HttpRequest& req, Api api) const {
  const ApiContext ctx = api_context();
  switch (api) {
    case Api::Completions: return {parse_completion_request(ctx, req.body, false), {}, {}, {}};
    case Api::Chat: return {parse_completion_request(ctx, req.body, true), {}, {}, {}};
    case Api::Messages:
      return {prepare_completion(ctx, anthropic_ask(parse_body(req.body), ctx, false)), {}, {}, {}};
    case Api::Infill: {
      InfillRequest ir = infill_ask(parse_body(req.body), ctx);
      ParsedRequest p = prepare_completion(ctx, std::move(ir.ask));
      return {std::move(p), {}, std::move(ir), {}};
    }
    case Api::LlamaCompletion: {
      LlamaCompletionRequest lr = llama_completion_ask(parse_body(req.body), ctx);
      lr.ask.until_context = true;  // n_predict -1 (the default): until the end or the context
      ParsedRequest p = prepare_completion(ctx, std::move(lr.ask));
      return {std::move(p), {}, {}, std::move(lr.prompt_text)};
    }
    case Api::Responses: {
      ResponsesRequest rr = responses_ask(parse_body(req.body), responses_, ctx);
      ParsedRequest p = prepare_completion(ctx, std::move(rr.ask));
      return {std::move(p), std::move(rr), {}, {}};
    }
    case Api::OllamaChat:
    case Api::OllamaGenerate: {
      OllamaRequest o = ollama_ask(parse_body(req.body), ctx, api == Api::OllamaGenerate);
      const std::string asked = o.ask.model;
      if (ollama_model_name(asked, c_.model_names).empty())
        throw ApiError{404, fmt::format("model '{}' not found", asked), "model", "", ""};
      const bool max_given = o.ask.max_tokens.has_value();
      ParsedRequest p = prepare_completion(ctx, std::move(o.ask));
      for (auto& one : p.prompts) {
        const auto n_prompt = static_cast<int64_t>(one.tokens.size());
        if (!max_given) one.max_tokens = ctx.n_ctx - n_prompt;  // num_predict -1: until the end or the context
        if (o.num_ctx > 0) {  // the context the client asked for: the prompt and the generation within it
          if (n_prompt >= o.num_ctx)
            throw bad_request("options.num_ctx", fmt::format("the prompt has {} tokens, more than 'options.num_ctx' ({})",
                                                             n_prompt, o.num_ctx));
          one.max_tokens = std::min(one.max_tokens, o.num_ctx - n_prompt);
        }
      }
      p.serve.params.max_tokens = p.prompts.front().max_tokens;
      return {std::move(p), {}, {}, {}};
    }
    case Api::Embeddings:
    case Api::OllamaEmbed:
    case Api::Rerank:
      break;  // not generation: their own routes parse them
  }
  throw Error("unknown API");
}

HttpResponse ApiRoutes::start_completion(const HttpRequest& req, Api api, QueueSlot slot,
                                        const std::shared_ptr<RequestTrace>& trace) {
  Prepared prepared;
  ParsedRequest& p = prepared.p;
  try {
    prepared = parse(req, api);
    if (c_.lora) p.serve.params.lora = c_.lora->set_for(p.model, p.lora);
    else if (p.lora && !p.lora->empty()) throw bad_request("lora[0].id", "the server has no LoRA adapters (--lora)");
  } catch (const ApiError& e) {
    return rejected(e, api);
  } catch (const std::exception& e) {
    return rejected({400, e.what(), "", "invalid_request_error", ""}, api);
  }
  const bool chat = p.chat;  // (Ollama's raw generate is a completion)
  if (chat && c_.split_reasoning && p.reasoning_opened && p.tool_grammar_held)
    // The prompt leaves <think> open (DeepSeek-V3.2/V4 and R1 with thinking on): the reply is reasoning
    // until </think>, but the calls' grammar holds it to calls from its first token.
    return rejected({400,
                     "tool_choice \"required\" or a named function with a prompt that opens reasoning (thinking on) is "
                     "not supported: turn thinking off for this request or use tool_choice \"auto\"",
                     "tool_choice", "invalid_request_error", ""},
                    api);
  p.serve.arrival = req.arrival;
  p.serve.operation = chat ? "chat" : "text_completion";
  p.serve.model = p.model;
  const int priority = p.serve.params.priority;
  // One request per prompt and choice (index = prompt * n + choice), each with its own place in the queue
  // and seed; a prompt's n choices share its KV blocks through the prefix cache.
  const size_t total = p.prompts.size() * static_cast<size_t>(p.n);
  std::vector<QueueSlot> slots;
  if (auto refused = more_slots(std::move(slot), total, slots, api, "prompt",
                                fmt::format("{} prompts x {} choices", p.prompts.size(), p.n)))
    return *refused;
  std::vector<std::shared_ptr<RequestChannel>> chs;
  try {
    for (size_t k = 0; k < total; k++) {
      const ParsedRequest::Prompt& prompt = p.prompts[k / static_cast<size_t>(p.n)];
      ServeRequest one = p.serve;
      one.params.prompt = prompt.tokens;
      one.params.max_tokens = prompt.max_tokens;
      one.params.sampling.seed = p.serve.params.sampling.seed + static_cast<uint64_t>(k % static_cast<size_t>(p.n));
      chs.push_back(engine_.submit(std::move(slots[k]), one));
    }
  } catch (const Error& e) {
    for (auto& c : chs) c->cancel();
    return rejected({400, e.what(), "max_tokens", "invalid_request_error", "context_length_exceeded"}, api);
  }
  const int64_t id = next_id_++;
  const CompletionIds ids{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", id), chat, unix_seconds(), p.model,
                          p.token_ids_in_logprobs, p.n};
  const bool want_logprobs = p.serve.params.top_logprobs >= 0;
  if (trace) {
    std::string response_id;
    switch (api) {
      case Api::Completions:
      case Api::Chat: response_id = ids.id; break;
      case Api::Responses: response_id = fmt::format("resp_{}", id); break;
      case Api::Messages: response_id = fmt::format("msg_{}", id); break;
      default: break;  // Ollama's and infill's answers carry no id
    }
    const SamplingParams& sp = p.serve.params.sampling;
    trace->accepted({p.serve.operation, p.model, c_.model_names.front(), p.serve.params.max_tokens, sp.temperature,
                     sp.top_p},
                    static_cast<int>(total), std::move(response_id));
  }
  auto on_end = [this, id, priority, trace](const StreamEvent& end) {
    log_request(id, priority, end);
    if (trace) trace->choice_ended(end);
  };
  HttpResponse r;
  std::optional<ReplyParser> reply;
  // The other APIs have reasoning of their own in their answers (thinking blocks): always split there.
  const bool split = c_.split_reasoning || (api != Api::Chat && chat && c_.chat_template->reasons());
  if (chat && (split || p.tool_format != ToolCallFormat::None))
    reply.emplace(split ? std::optional<bool>(p.reasoning_opened) : std::nullopt, p.tool_format, p.parallel_tool_calls,
                  c_.chat_template->reasoning_tags());
  // One reply, as typed events, whichever API asked: each front only says them in its own shape.
  auto events = std::make_shared<ReplyEvents>(std::move(chs), std::move(reply), on_end);
  switch (api) {
    case Api::OllamaChat:
    case Api::OllamaGenerate:
      answer_with(r,
                  std::make_shared<OllamaAnswer>(
                      events, OllamaIds{p.model, api == Api::OllamaGenerate, req.arrival, want_logprobs}, p.stream),
                  p.stream, "application/x-ndjson");
      break;
    case Api::Infill: {
      const InfillRequest& ir = prepared.infill;
      answer_with(r, std::make_shared<InfillAnswer>(events, InfillIds{p.model, ir.extra_dropped, ir.prompt_text}, p.stream),
                  p.stream);
      break;
    }
    case Api::LlamaCompletion:
      answer_with(r, std::make_shared<InfillAnswer>(events, InfillIds{p.model, -1, prepared.native_prompt}, p.stream),
                  p.stream);
      break;
    case Api::Responses: {
      const ResponsesRequest& rr = prepared.responses;
      const Tokenizer* tok = engine_.engine().tokenizer.get();
      ResponsesIds rids{fmt::format("resp_{}", id), p.model, unix_seconds(), rr.echo, rr.conversation, rr.store, rr.logprobs,
                        [tok](const std::string& text) { return static_cast<int64_t>(tok->encode(text, false, false).size()); }};
      answer_with(r, std::make_shared<ResponsesAnswer>(events, std::move(rids), p.stream, responses_), p.stream);
      break;
    }
    case Api::Messages: {
      const AnthropicIds aids{fmt::format("msg_{}", id), p.model, static_cast<int64_t>(p.serve.params.prompt.size()),
                              p.cache_breakpoint_tokens};
      answer_with(r, std::make_shared<AnthropicAnswer>(events, aids, p.stream), p.stream);
      break;
    }
    default:  // OpenAI's completions and chat
      if (p.stream) {
        r.content_type = "text/event-stream";
        r.headers.emplace_back("Cache-Control", "no-cache");
        r.stream = std::make_shared<CompletionStream>(events, ids, want_logprobs, p.include_usage_chunk);
      } else {
        r.later = std::make_shared<WholeCompletion>(events, ids, want_logprobs);
      }
  }
  return r;
}

void ApiRoutes::log_request(int64_t id, int priority, const StreamEvent& end) {
  std::lock_guard lock(log_mutex_);
  if (c_.log_json) {
    const json line = {{"id", id},
                       {"priority", priority},
                       {"prompt_tokens", end.prompt_tokens},
                       {"cached_tokens", end.cached_tokens},
                       {"completion_tokens", end.completion_tokens},
                       {"finish_reason", end.finish_reason},
                       {"queue_ms", end.queue_ms},
                       {"ttft_ms", end.ttft_ms},
                       {"e2e_ms", end.e2e_ms}};
    fmt::print(stderr, "{}\n", json_text(line));
  } else {
    fmt::print(stderr,
               "[kestrel] request {} priority {}: {} prompt ({} cached) + {} generated tokens, {} (queue {:.1f} ms, "
               "first token {:.1f} ms, total {:.1f} ms)\n",
               id, priority, end.prompt_tokens, end.cached_tokens, end.completion_tokens, end.finish_reason,
               end.queue_ms, end.ttft_ms, end.e2e_ms);
  }
}

}  // namespace kestrel
