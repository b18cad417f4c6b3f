#pragma once
// The projector flags `run`, `serve` and `bench` share beside their own --mmproj: llama.cpp's --image-min-tokens
// and --image-max-tokens, and loading the projector for the loaded text model with them applied.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "mmproj/mmproj.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {

inline void add_image_token_options(CLI::App* cmd, ImageTokenLimits& l) {
  cmd->add_option("--image-min-tokens", l.min,
                  "With --mmproj: the fewest tokens an image becomes, for projectors that size images by their own "
                  "(Qwen3.5: default 8; grounding wants 1024)");
  cmd->add_option("--image-max-tokens", l.max, "With --mmproj: the most tokens an image becomes (Qwen3.5: default 4096)");
}

// The projector at path (null: none given) for e's text model, the limits applied, its encoders on `be` (null: e's
// backend); --image-min/max-tokens without --mmproj is an error.
inline std::unique_ptr<Mmproj> load_mmproj(const std::string& path, const ImageTokenLimits& l, LoadedModel& e,
                                           Backend* be = nullptr) {
  if (path.empty()) {
    if (l.set()) throw Error("--image-min-tokens/--image-max-tokens need --mmproj");
    return nullptr;
  }
  auto mm = Mmproj::load(path, be ? *be : *e.backend, e.model->config().arch, e.model->config().n_embd);
  if (mm->vision()) mm->vision()->set_token_limits(l);
  else if (l.set()) throw Error("--image-min-tokens/--image-max-tokens: this mmproj has no vision encoder");
  return mm;
}

}  // namespace kestrel::cli
