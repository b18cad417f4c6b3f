// kestrel serve --models-dir DIR / --models-preset FILE: the models and their flags, for the model manager.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "cli/serve_model.h"
#include "core/error.h"
#include "serving/models/model_catalog.h"

namespace kestrel::cli {
namespace {

// Flags a preset cannot set per model: the server's own (one listener, one set of keys, one trace exporter) and
// the manager's.
const std::set<std::string> kServerWide = {
    "host", "port", "http-threads", "http-workers", "api-key", "api-key-file", "ssl-cert-file", "ssl-key-file",
    "cors-origin", "allowed-host", "metrics-require-key", "max-connections", "max-body-bytes", "header-timeout",
    "idle-timeout", "body-timeout", "write-timeout", "shutdown-timeout", "log-format", "otlp-endpoint", "models-dir",
    "models-preset", "models-max", "models-memory", "no-models-autoload", "profile", "parallel", "parallel-timeout",
    "parallel-no-overlap", "parallel-no-step-pipelining", "parallel-expert-sum"};

using Keys = std::vector<std::pair<std::string, std::string>>;

// One model's flags: the command line's, then (for what the command line leaves unset) its section's keys, then
// [*]'s. The preset-only keys (model, pin, load-on-startup, idle-unload) go to the spec.
ServeFlags model_flags(const ServeFlags& f, const CLI::App* cmd, const Keys& global, const Keys& own,
                       ModelSpec& spec, const std::string& where) {
  std::map<std::string, std::string> keys;
  std::vector<std::string> order;
  for (const Keys* ks : {&global, &own})
    for (const auto& [k, v] : *ks) {
      if (!keys.count(k)) order.push_back(k);
      keys[k] = v;
    }
  ServeFlags mf = f;
  CLI::App app;
  add_serve_options(&app, mf);
  std::vector<std::string> args;
  for (const std::string& k : order) {
    const std::string& v = keys[k];
    const std::string what = fmt::format("{}: {}", where, k);
    if (kServerWide.count(k))
      throw Error(fmt::format("{}: '{}' is the whole server's flag, not a model's (give it on the command line)",
                              where, k));
    if (k == "pin") {
      spec.pin = preset_bool(v, what);
    } else if (k == "load-on-startup") {
      spec.load_on_startup = preset_bool(v, what);
    } else if (k == "idle-unload") {
      try {
        spec.idle_unload_s = std::stod(v);
      } catch (const std::exception&) {
        throw Error(fmt::format("{}: '{}' is not a number of seconds", what, v));
      }
    } else if (k == "model" || k == "m") {
      spec.path = v;
    } else {
      const std::string flag = k.size() == 1 ? "-" + k : "--" + k;
      const CLI::Option* given = cmd->get_option_no_throw(flag);
      const CLI::Option* opt = app.get_option_no_throw(flag);
      if (!given || !opt) throw Error(fmt::format("{}: '{}' is no flag of kestrel serve", where, k));
      if (given->count() > 0) continue;  // the command line's value wins
      if (opt->get_expected_max() == 0) {  // a flag: on or off
        if (preset_bool(v, what)) args.push_back(flag);
      } else {
        args.push_back(flag);
        args.push_back(v);
      }
    }
  }
  std::reverse(args.begin(), args.end());  // (CLI11 takes them last first)
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  if (spec.path.empty()) throw Error(fmt::format("{}: no model file (a 'model = PATH' key)", where));
  mf.engine.model_path = spec.path;
  if (mf.mmproj.empty()) mf.mmproj = spec.mmproj;
  spec.mmproj = mf.mmproj;
  spec.aliases.clear();
  for (const auto& n : mf.served_names)
    if (n != spec.name) spec.aliases.push_back(n);
  for (const auto& m : mf.lora_modules)
    if (const size_t eq = m.find('='); eq != std::string::npos && eq > 0) spec.aliases.push_back(m.substr(0, eq));
  check_serve_flags(mf);
  return mf;
}

}  // namespace

std::unique_ptr<ModelManager> make_model_manager(const ServeFlags& f, const CLI::App* cmd, ServerMetrics& metrics,
                                                 std::shared_ptr<SpanExporter> tracer, Offload offload) {
  if (!f.served_names.empty())
    throw Error("--served-model-name names the one model of -m; with several, each is named by its file or preset "
                "section (served-model-name in a section adds aliases)");
  if (!f.lora_modules.empty() && f.models_preset.empty())
    throw Error("--lora-modules with several models: give them per model, in a preset section");
  std::vector<ModelSpec> specs;
  if (!f.models_dir.empty()) specs = scan_models_dir(f.models_dir);
  PresetFile preset;
  if (!f.models_preset.empty()) preset = read_preset_file(f.models_preset);
  for (const auto& sec : preset.models)
    if (std::none_of(specs.begin(), specs.end(), [&](const ModelSpec& s) { return s.name == sec.name; })) {
      ModelSpec s;
      s.name = sec.name;
      s.source = "preset";
      specs.push_back(std::move(s));
    }
  auto flags = std::make_shared<std::map<std::string, ServeFlags>>();
  for (ModelSpec& s : specs) {
    const PresetSection* own = nullptr;
    for (const auto& sec : preset.models)
      if (sec.name == s.name) own = &sec;
    const std::string where =
        own ? fmt::format("{}:{}: [{}]", f.models_preset, own->line, s.name) : fmt::format("model '{}'", s.name);
    static const Keys none;
    flags->emplace(s.name, model_flags(f, cmd, preset.global, own ? own->keys : none, s, where));
  }
  ModelManagerConfig mc;
  mc.models_max = f.models_max;
  mc.memory_bytes = f.models_memory.empty() ? 0 : parse_size(f.models_memory, "--models-memory");
  mc.autoload = !f.no_models_autoload;
  mc.idle_unload_s = f.idle_unload_s;
  for (const ModelSpec& s : specs)
    fmt::print(stderr, "[kestrel] model '{}': {}{}{}{}\n", s.name, s.path, s.mmproj.empty() ? "" : " + " + s.mmproj,
               s.aliases.empty() ? "" : fmt::format(" (also '{}')", fmt::join(s.aliases, "', '")),
               s.pin ? ", pinned" : "");
  ModelLoader loader = [flags, tracer, offload](const ModelSpec& spec, ServerMetrics& m,
                                                const std::function<void(const std::string&)>& stage) {
    const ServeFlags& mf = flags->at(spec.name);
    LoadOptions eo = serve_load_options(mf);
    eo.on_stage = stage;
    auto loaded = std::make_unique<LoadedModel>(LoadedModel::load(eo));
    ServedSetup setup;
    setup.names = {spec.name};
    for (const auto& a : mf.served_names)
      if (a != spec.name) setup.names.push_back(a);
    setup.metrics = &m;
    setup.tracer = tracer;
    setup.offload = offload;
    setup.stage = stage;
    std::unique_ptr<ServedModel> served = build_served_model(mf, eo, std::move(loaded), setup);
    fmt::print(stderr, "[kestrel] model '{}': {}\n", spec.name, served->describe(mf));
    served->print_media();
    return std::unique_ptr<HostedModel>(std::move(served));
  };
  return std::make_unique<ModelManager>(std::move(specs), mc, std::move(loader), metrics);
}

}  // namespace kestrel::cli
