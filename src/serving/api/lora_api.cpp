#include "serving/api/lora_api.h"

#include <fmt/format.h>

#include <cmath>

#include "serving/api/openai_api.h"

namespace kestrel {

LoraTable::LoraTable(std::vector<Entry> entries) : entries_(std::move(entries)) {
  for (const Entry& e : entries_) module_sets_.push_back(e.name.empty() ? nullptr : make_lora_set({{e.adapter, 1.0f}}));
  global_ = global_locked();
}

std::shared_ptr<const LoraSet> LoraTable::global_locked() const {
  std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> list;
  for (const Entry& e : entries_) list.emplace_back(e.adapter, e.scale);
  return make_lora_set(std::move(list));
}

nlohmann::json LoraTable::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < entries_.size(); i++) {
    const Entry& e = entries_[i];
    nlohmann::json a = {{"id", i},
                        {"path", e.adapter->path()},
                        {"scale", e.scale},
                        {"task_name", e.adapter->task_name()},
                        {"prompt_prefix", e.adapter->prompt_prefix()}};
    if (!e.name.empty()) a["name"] = e.name;
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<std::pair<int, float>> parse_lora_field(const nlohmann::ordered_json& v, const std::string& where) {
  if (!v.is_array()) throw bad_request(where, fmt::format("'{}' must be an array of {{\"id\", \"scale\"}}", where));
  std::vector<std::pair<int, float>> out;
  for (size_t i = 0; i < v.size(); i++) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const auto& e = v[i];
    if (!e.is_object()) throw bad_request(at, fmt::format("'{}' must be an object {{\"id\", \"scale\"}}", at));
    for (const auto& [key, value] : e.items())
      if (key != "id" && key != "scale") throw bad_request(at + "." + key, fmt::format("unknown field '{}.{}'", at, key));
    if (!e.contains("id") || !e["id"].is_number_integer())
      throw bad_request(at + ".id", fmt::format("'{}.id' must be an adapter's id (an integer)", at));
    if (!e.contains("scale") || !e["scale"].is_number())
      throw bad_request(at + ".scale", fmt::format("'{}.scale' must be a number", at));
    const double s = e["scale"].get<double>();
    if (!std::isfinite(s) || std::abs(s) > 1e6)
      throw bad_request(at + ".scale", fmt::format("'{}.scale' {} is out of range", at, s));
    const auto id = e["id"].get<int64_t>();
    if (id < 0 || id > 1000000) throw bad_request(at + ".id", fmt::format("'{}.id' {} is not an adapter's id", at, id));
    for (const auto& [seen, scale] : out)
      if (seen == id) throw bad_request(at + ".id", fmt::format("adapter {} is listed twice in '{}'", id, where));
    out.emplace_back(static_cast<int>(id), static_cast<float>(s));
  }
  return out;
}

void LoraTable::set_scales(const nlohmann::ordered_json& body) {
  const auto list = parse_lora_field(body, "body");
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < list.size(); i++)
    if (list[i].first >= static_cast<int>(entries_.size()))
      throw bad_request(fmt::format("body[{}].id", i),
                        fmt::format("no adapter {} (the server has {})", list[i].first, entries_.size()));
  for (Entry& e : entries_) e.scale = 0.0f;
  for (const auto& [id, scale] : list) entries_[static_cast<size_t>(id)].scale = scale;
  global_ = global_locked();
}

std::shared_ptr<const LoraSet> LoraTable::set_for(const std::string& model,
                                                  const std::optional<std::vector<std::pair<int, float>>>& lora) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (lora) {
    std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> list;
    for (size_t i = 0; i < lora->size(); i++) {
      const auto [id, scale] = (*lora)[i];
      if (id >= static_cast<int>(entries_.size()))
        throw bad_request(fmt::format("lora[{}].id", i),
                          fmt::format("no adapter {} (the server has {}: GET /lora-adapters lists them)", id,
                                      entries_.size()));
      list.emplace_back(entries_[static_cast<size_t>(id)].adapter, scale);
    }
    return make_lora_set(std::move(list));
  }
  const std::string bare = model.size() > 7 && model.ends_with(":latest") ? model.substr(0, model.size() - 7) : model;
  for (size_t i = 0; i < entries_.size(); i++)
    if (!entries_[i].name.empty() && (entries_[i].name == model || entries_[i].name == bare)) return module_sets_[i];
  return global_;
}

std::vector<std::string> LoraTable::model_names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_)
    if (!e.name.empty()) out.push_back(e.name);
  return out;
}


}  // namespace kestrel
