// A chat request's messages, checked and put in the shape Hugging Face chat
// templates read (the OpenAI shape, tool-call arguments as objects), then
// rendered by the model's template.
#include <fmt/format.h>

#include "chat/tool_call_grammar.h"
#include "core/error.h"
#include "serving/api/media_input.h"
#include "serving/api/openai_api.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

// The content as one string (text parts joined; an image part is the media marker, its bytes in `media`), or
// null where the role may leave it out (an assistant turn that only calls tools).
ojson message_content(const ApiContext& ctx, const ojson& m, size_t i, bool may_be_null, std::vector<MediaPart>& media) {
  const std::string param = fmt::format("messages[{}].content", i);
  if (!m.contains("content") || m["content"].is_null()) {
    if (may_be_null) return nullptr;
    throw bad_request(param, fmt::format("'{}' is missing", param));
  }
  const ojson& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request(param, fmt::format("'{}' must be a string or an array of text parts", param));
  std::string text;
  // With images the parts join as llama-server joins them: a newline between two text parts, none next to an
  // image (its common/chat.cpp); text parts alone join as they are.
  bool with_media = false, after_marker = false;
  for (const auto& part : c)
    with_media = with_media || (part.is_object() && (string_or_empty(part, "type") == "image_url" ||
                                                     string_or_empty(part, "type") == "input_audio"));
  for (size_t k = 0; k < c.size(); k++) {
    const ojson& part = c[k];
    const std::string pp = fmt::format("{}[{}]", param, k);
    const std::string type = part.is_object() ? string_or_empty(part, "type") : "";
    if ((type == "image_url" || type == "input_audio") && m.value("role", "") != "assistant") {
      after_marker = true;
      media.push_back(type == "image_url" ? image_part(part, pp, ctx) : audio_part(part, pp, ctx));
      if (ctx.media->max_images > 0 && media.size() > static_cast<size_t>(ctx.media->max_images))
        throw bad_request(pp, fmt::format("'{}' is media input {} of the request; the server takes at most {} per "
                                          "request",
                                          pp, media.size(), ctx.media->max_images));
      text += ctx.media->marker;
      continue;
    }
    if (type != "text" || !part.contains("text") || !part["text"].is_string())
      throw bad_request(param, fmt::format("'{}' parts must be {{\"type\": \"text\", \"text\": ...}} or, for a "
                                           "user's message, {{\"type\": \"image_url\", \"image_url\": {{\"url\": "
                                           "...}}}} or {{\"type\": \"input_audio\", \"input_audio\": {{\"data\": "
                                           "..., \"format\": \"wav\"}}}}",
                                           param));
    if (with_media && !after_marker && !text.empty()) text += '\n';
    after_marker = false;
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant's earlier tool calls; arguments (a JSON string in the OpenAI
// API) become an object, as vLLM and llama.cpp hand them to templates.
ojson tool_calls(const ojson& calls, size_t i) {
  const std::string param = fmt::format("messages[{}].tool_calls", i);
  if (!calls.is_array()) throw bad_request(param, fmt::format("'{}' must be an array", param));
  ojson out = ojson::array();
  for (size_t k = 0; k < calls.size(); k++) {
    const ojson& c = calls[k];
    const std::string cp = fmt::format("{}[{}]", param, k);
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      throw bad_request(cp, fmt::format("'{}' must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                                        "\"arguments\"}}}}",
                                        cp));
    if (c.contains("type") && c["type"] != "function")
      throw bad_request(cp + ".type", fmt::format("'{}.type' must be \"function\"", cp));
    ojson call = c;
    ojson& fn = call["function"];
    if (fn.contains("arguments") && fn["arguments"].is_string()) {
      ojson parsed = ojson::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (parsed.is_object()) fn["arguments"] = std::move(parsed);
    } else if (!fn.contains("arguments")) {
      fn["arguments"] = ojson::object();
    }
    out.push_back(std::move(call));
  }
  return out;
}

ojson checked_messages(const ApiContext& ctx, const ojson& body, std::vector<MediaPart>& media) {
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    throw bad_request("messages", "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  ojson out = ojson::array();
  const ojson& msgs = body["messages"];
  for (size_t i = 0; i < msgs.size(); i++) {
    const ojson& m = msgs[i];
    const std::string rp = fmt::format("messages[{}].role", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad_request(rp, fmt::format("'{}' must be a string", rp));
    std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      throw bad_request(rp, fmt::format("'{}' = '{}' is not system, developer, user, assistant or tool", rp, role));
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn; templates know "system"
    for (const auto& [key, value] : m.items()) {
      const bool known = key == "role" || key == "content" || key == "name" ||
                         (role == "assistant" && (key == "tool_calls" || key == "reasoning_content")) ||
                         (role == "tool" && key == "tool_call_id");
      if (!known && !value.is_null())
        throw bad_request(fmt::format("messages[{}].{}", i, key),
                          fmt::format("'messages[{}].{}' is not supported for a {} message", i, key, role));
    }
    const bool calls = role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    ojson n = {{"role", role}, {"content", message_content(ctx, m, i, calls, media)}};
    for (const char* key : {"name", "tool_call_id", "reasoning_content"})
      if (m.contains(key) && !m[key].is_null()) {
        if (!m[key].is_string())
          throw bad_request(fmt::format("messages[{}].{}", i, key), fmt::format("'messages[{}].{}' must be a string", i, key));
        n[key] = m[key];
      }
    if (calls) n["tool_calls"] = tool_calls(m["tool_calls"], i);
    out.push_back(std::move(n));
  }
  return out;
}

// OpenAI's function tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}].
ojson checked_tools(const ojson& body) {
  if (!body.contains("tools") || body["tools"].is_null()) return nullptr;
  const ojson& tools = body["tools"];
  if (!tools.is_array()) throw bad_request("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
  for (size_t i = 0; i < tools.size(); i++) {
    const ojson& t = tools[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!t.is_object() || string_or_empty(t, "type") != "function" || !t.contains("function") || !t["function"].is_object())
      throw bad_request(param, fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{...}}}}", param));
    for (const auto& [key, value] : t.items())
      if (key != "type" && key != "function") throw bad_request(param + "." + key, fmt::format("unknown field '{}.{}'", param, key));
    const ojson& f = t["function"];
    const std::string fp = param + ".function";
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty() ||
        f["name"].get<std::string>().size() > 64 ||
        f["name"].get<std::string>().find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
            std::string::npos)
      throw bad_request(fp + ".name", fmt::format("'{}.name' must be 1 to 64 letters, digits, '_', '-' or '.'", fp));
    for (const auto& [key, value] : f.items()) {
      if (key == "name") continue;
      if (key == "description" && value.is_string()) continue;
      if (key == "parameters" && value.is_object()) continue;
      if (key == "strict" && value.is_boolean()) continue;  // checked against tool_choice below
      throw bad_request(fp + "." + key, fmt::format("'{}.{}' is not a known field of the right type", fp, key));
    }
  }
  return tools;
}

ojson checked_kwargs(const ojson& body) {
  if (!body.contains("chat_template_kwargs") || body["chat_template_kwargs"].is_null()) return ojson::object();
  const ojson& k = body["chat_template_kwargs"];
  if (!k.is_object()) throw bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
  for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    if (k.contains(reserved))
      throw bad_request(fmt::format("chat_template_kwargs.{}", reserved),
                        fmt::format("'chat_template_kwargs.{}' is set by the server, not by a request", reserved));
  return k;
}

}  // namespace

ChatPrompt render_chat_request(const ApiContext& ctx, const ojson& body, bool add_generation_prompt) {
  ChatPrompt out;
  ojson messages = checked_messages(ctx, body, out.media);
  if (ctx.tool_format == ToolCallFormat::Harmony)
    // gpt-oss's template reads an assistant turn's reasoning as `thinking`, and tests `... in message.content`
    // wherever the key exists: a call's null content goes (llama.cpp adjusts the messages alike).
    for (ojson& m : messages) {
      if (m["role"] != "assistant") continue;
      if (m.contains("reasoning_content")) m["thinking"] = m["reasoning_content"];
      if (m.contains("tool_calls") && m["content"].is_null()) m.erase("content");
    }
  ojson kwargs = checked_kwargs(body);
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    // OpenAI's field, as the templates that read it take it (gpt-oss's "Reasoning: high", DeepSeek-V4's 'max').
    const ojson& effort = body["reasoning_effort"];
    if (!effort.is_string()) throw bad_request("reasoning_effort", "'reasoning_effort' must be a string");
    if (!ctx.chat_template->reads("reasoning_effort"))
      throw bad_request("reasoning_effort", "this model's chat template does not read 'reasoning_effort': it would change nothing");
    if (kwargs.contains("reasoning_effort") && kwargs["reasoning_effort"] != effort)
      throw bad_request("reasoning_effort", "'reasoning_effort' and 'chat_template_kwargs.reasoning_effort' differ");
    kwargs["reasoning_effort"] = effort;
  }
  ojson tools = checked_tools(body);
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean())
      throw bad_request("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    out.parallel_tool_calls = body["parallel_tool_calls"].get<bool>();
  }
  std::string choice = tools.is_null() ? "none" : "auto";
  std::string named;  // tool_choice naming one function
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c.is_string() && (c == "auto" || c == "none" || c == "required")) {
      choice = c.get<std::string>();
    } else if (c.is_object() && string_or_empty(c, "type") == "function" && c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string() && c.size() == 2 &&
               c["function"].size() == 1) {
      choice = "required";
      named = c["function"]["name"].get<std::string>();
    } else {
      throw bad_request("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
                                       "\"function\", \"function\": {\"name\": ...}}");
    }
    if (tools.is_null() && choice != "none") throw bad_request("tool_choice", "'tool_choice' needs 'tools'");
  }
  // "none": the model is not shown the tools, as OpenAI's promise that it calls none requires.
  if (choice == "none") tools = nullptr;
  if (!tools.is_null() && choice == "auto")
    for (size_t i = 0; i < tools.size(); i++)
      if (tools[i]["function"].value("strict", false))
        // A reply under "auto" may be prose or a call; only a reply that must be calls is constrained.
        throw bad_request(fmt::format("tools[{}].function.strict", i),
                          "'strict': true needs 'tool_choice' \"required\" or a named function (replies under "
                          "\"auto\" are not constrained)");
  out.tools_offered = !tools.is_null() && !tools.empty();
  if (out.tools_offered && ctx.tool_format == ToolCallFormat::None)
    throw bad_request("tools", "this model's chat template shows no tool-call format Kestrel can read; start the "
                               "server with --tool-call-parser (hermes, llama3_json, deepseek, mistral, dsml, harmony)");
  if (choice == "required") {
    // Every reply must be calls: decoding is held to the grammar of the format's calls.
    try {
      out.tool_grammar = tool_call_gbnf(ctx.tool_format, tools, named, out.parallel_tool_calls);
    } catch (const Error& e) {
      throw bad_request(named.empty() ? "tools" : "tool_choice", e.what());
    }
  }
  try {
    out.rendered = ctx.chat_template->render(messages, tools, kwargs, add_generation_prompt);
    return out;
  } catch (const jinja::TemplateError& e) {
    // The template's own refusals (raise_exception) are its words about the conversation.
    throw bad_request("messages", e.raised ? e.what() : fmt::format("the chat template failed: {}", e.what()));
  }
}

}  // namespace kestrel
