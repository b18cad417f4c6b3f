// Ollama's listings, which its clients probe before they chat: GET /api/tags
// (the models), /api/ps (the loaded ones: the same here), /api/version, and
// POST /api/show (one model's details, template and capabilities). The
// generation endpoints are routes_completion.cpp's.
#include <fmt/format.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "serving/api/api_routes.h"
#include "serving/api/ollama_api.h"

namespace kestrel {

using json = nlohmann::json;

json ApiRoutes::ollama_details() const {
  const GgufFile* f = engine_.engine().file.get();
  std::string family = "unknown", size, quant;
  int64_t params = 0;
  if (f) {
    family = f->get_string("general.architecture").value_or(family);
    size = f->get_string("general.size_label").value_or("");
    for (const auto& t : f->tensors()) params += t.n_elements();
    // The type most of the weights are stored in.
    std::map<std::string, size_t> bytes;
    for (const auto& t : f->tensors()) bytes[std::string(type_name(t.type))] += t.nbytes;
    size_t most = 0;
    for (const auto& [name, b] : bytes)
      if (b > most) most = b, quant = name;
  }
  if (size.empty())
    size = params >= 1000000000 ? fmt::format("{:.1f}B", params / 1e9)
           : params >= 1000000  ? fmt::format("{:.1f}M", params / 1e6)
                                : fmt::format("{:.1f}K", params / 1e3);
  return {{"parent_model", ""}, {"format", "gguf"}, {"family", family}, {"families", {family}},
          {"parameter_size", size}, {"quantization_level", quant}};
}

HttpResponse ApiRoutes::ollama_tags(bool running) const {
  const GgufFile* f = engine_.engine().file.get();
  const auto size = static_cast<int64_t>(f ? f->file_size() : 0);
  const std::string modified = ollama_time(std::chrono::system_clock::from_time_t(started_));
  json models = json::array();
  for (const auto& name : c_.model_names) {
    const std::string tagged = name.find(':') == std::string::npos ? name + ":latest" : name;
    json m = {{"name", tagged}, {"model", tagged}, {"modified_at", modified}, {"size", size},
              {"digest", fmt::format("{:016x}", std::hash<std::string>{}(name))}, {"details", ollama_details()}};
    if (running) {
      m["expires_at"] = "2318-01-01T00:00:00Z";  // loaded until the server stops
      m["size_vram"] = 0;                        // (the CPU's memory)
      m["context_length"] = engine_.n_ctx();
    }
    models.push_back(std::move(m));
  }
  return json_response(json_text({{"models", models}}));
}

HttpResponse ApiRoutes::ollama_show(const HttpRequest& req) const {
  try {
    const auto j = parse_body(req.body);
    const char* key = j.contains("model") ? "model" : "name";  // (older clients send "name")
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) throw bad_request("model", "'model' is required");
    const std::string asked = j[key];
    if (ollama_model_name(asked, c_.model_names).empty())
      throw ApiError{404, fmt::format("model '{}' not found", asked), "model", "", ""};
    json capabilities = {"completion"};
    if (c_.tool_format != ToolCallFormat::None) capabilities.push_back("tools");
    if (c_.chat_template && c_.chat_template->reasons()) capabilities.push_back("thinking");
    if (c_.media.vision) capabilities.push_back("vision");  // Ollama's name for a model that takes images
    const json details = ollama_details();
    return json_response(json_text({{"modelfile", ""},
                                    {"parameters", ""},
                                    {"template", c_.chat_template ? c_.chat_template->source() : ""},
                                    {"details", details},
                                    {"model_info",
                                     {{"general.architecture", details["family"]},
                                      {details["family"].get<std::string>() + ".context_length", engine_.n_ctx()}}},
                                    {"capabilities", capabilities},
                                    {"modified_at", ollama_time(std::chrono::system_clock::from_time_t(started_))}}));
  } catch (const ApiError& e) {
    return ollama_error_response(e);
  }
}

}  // namespace kestrel
