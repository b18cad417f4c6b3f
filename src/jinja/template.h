#pragma once
// A Jinja2 template, parsed once and rendered many times, the way Hugging Face
// transformers renders chat templates (ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, loop controls; globals raise_exception,
// strftime_now, namespace, range, dict). Rendering runs in a sandbox: no
// file or environment access, and limits on output, loop steps and call depth.
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace kestrel::jinja {

struct Stmt;

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // also bounds any one string built
  size_t max_list_items = size_t{1} << 20;     // any one list built (range, +, *): ~100 MB of values at most
  uint64_t max_steps = 10'000'000;            // loop iterations + macro calls + range() items
  int max_call_depth = 64;                    // nested macro calls
};

struct RenderOptions {
  // The wall-clock time strftime_now() formats; the local time at render when unset.
  std::optional<std::tm> now;
  RenderLimits limits;
};

class Template {
 public:
  // Throws TemplateError("line N: ...") for a syntax error or an unknown filter/test.
  explicit Template(std::string_view source);
  // `vars` are the template's top-level variables. Throws TemplateError; for
  // raise_exception(msg), what() is msg and raised is true.
  TaintedString render(const ValueDict& vars, const RenderOptions& options = {}) const;
  // Whether the template reads a variable of this name anywhere (a Name expression: `reasoning_effort`,
  // `x is defined`), whatever the branch.
  bool reads(std::string_view name) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

// "2026-01-15T10:30:00" (or with a space, or a date alone) → a wall-clock
// time; throws Error naming the text.
std::tm parse_wall_time(const std::string& text);

}  // namespace kestrel::jinja
