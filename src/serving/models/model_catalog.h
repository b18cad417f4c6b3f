#pragma once
// The models a multi-model server knows before it loads any: found in a folder (serve --models-dir, llama-server's
// layout) or named by a preset file (serve --models-preset, llama-server's INI form). Loading them is the model
// manager's (model_manager.h); what a preset's keys mean is the command line's (cli/cmd_serve.cpp).
#include <string>
#include <utility>
#include <vector>

namespace kestrel {

// A model the server can serve, loaded or not.
struct ModelSpec {
  std::string name;                  // the id requests name it by (`model`)
  std::vector<std::string> aliases;  // more ids for it (a preset's served-model-name, its --lora-modules names)
  std::string path;                  // its GGUF (a split model's first shard)
  std::string mmproj;                // the projector found beside it ("": none)
  std::string source = "models_dir";  // or "preset"
  bool pin = false;                  // never evicted for room, never unloaded for idling
  bool load_on_startup = false;
  double idle_unload_s = -1;         // unloaded after this many idle seconds (< 0: the server's --idle-unload)
};

// The models in a folder, by name (llama-server's rules, common/preset.cpp): a top-level *.gguf is the model
// named by its file name without .gguf; a subfolder is the model named by the folder, its GGUF the one file
// that is no projector (a name containing "mmproj"), no draft (mtp-, dspark-, dflash-) and no later shard
// (-0000N-of- with N > 1), its projector the file whose name contains "mmproj". Top-level projectors and
// later shards are not models. Throws Error for an unreadable folder or a subfolder whose model is unclear.
std::vector<ModelSpec> scan_models_dir(const std::string& dir);

// A preset file: `version = 1`, then sections `[name]` of `key = value` lines (';' and '#' comments, a value
// continued by a trailing backslash); `[*]` holds what every model gets. Keys keep their order.
struct PresetSection {
  std::string name;
  int line = 0;  // where it starts (for errors)
  std::vector<std::pair<std::string, std::string>> keys;
};
struct PresetFile {
  std::vector<std::pair<std::string, std::string>> global;  // [*]
  std::vector<PresetSection> models;
};
// Throws Error naming the file and line for anything else (a key outside a section other than version, a
// version other than 1, a section or key twice, a line that is no key = value).
PresetFile read_preset_file(const std::string& path);

// true/false as a preset writes it (true, 1, yes, on / false, 0, no, off); throws Error naming `what` otherwise.
bool preset_bool(const std::string& value, const std::string& what);

}  // namespace kestrel
