#pragma once
// The server's LoRA adapters (serve --lora, --lora-scaled, --lora-modules; model/lora.h), as llama-server shows
// them (../shared/specs/multimodal-lora-router.md B.3): ids in load order, each with a global scale that GET and
// POST /lora-adapters read and set, and each request's set:
//   - its `lora` field ([{"id", "scale"}], llama-server's; ids not listed at scale 0): those adapters; an empty
//     list is no adapter (llama-server takes [] as absent; here it means what it says);
//   - else, a `model` that names an adapter (--lora-modules NAME=FILE, vLLM's): that adapter at scale 1;
//   - else the global scales.
// Requests with different sets run in the same steps (model/lora_backend.h), and the prefix cache keeps their KV
// apart (llama-server clears a slot's cache when the set changes, and serves the sets by turns).
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/lora.h"

namespace kestrel {

class LoraTable {
 public:
  struct Entry {
    std::shared_ptr<const LoraAdapter> adapter;
    float scale = 1.0f;  // the global one (--lora-init-without-apply, and --lora-modules' adapters: 0)
    std::string name;    // --lora-modules' model name, or empty
  };
  explicit LoraTable(std::vector<Entry> entries);

  // GET /lora-adapters: [{"id", "path", "scale", "task_name", "prompt_prefix"}] (plus "name" for a module).
  nlohmann::json list() const;
  // POST /lora-adapters: the body must be an array of {"id", "scale"}; listed ids take their scale, the others 0.
  // Throws ApiError naming the entry at fault (nothing changes then).
  void set_scales(const nlohmann::ordered_json& body);
  // The set a request runs (see above); `model` the name it asked for (an Ollama tag ":latest" allowed).
  std::shared_ptr<const LoraSet> set_for(const std::string& model,
                                         const std::optional<std::vector<std::pair<int, float>>>& lora) const;
  // The names --lora-modules serves.
  std::vector<std::string> model_names() const;
  size_t size() const { return entries_.size(); }

 private:
  std::shared_ptr<const LoraSet> global_locked() const;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::vector<std::shared_ptr<const LoraSet>> module_sets_;  // per entry with a name: its adapter at 1
  std::shared_ptr<const LoraSet> global_;
};

// A request's `lora` field: an array of {"id": integer, "scale": number} (Error naming `where`[i] otherwise; ids
// are checked against the table when the set is made).
std::vector<std::pair<int, float>> parse_lora_field(const nlohmann::ordered_json& v, const std::string& where);

}  // namespace kestrel
