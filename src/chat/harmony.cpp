#include "chat/harmony.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

namespace kestrel {
namespace {

constexpr std::string_view kMessage = "<|message|>", kChannel = "<|channel|>";
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|return|>", "<|call|>", "<|start|>"};

// The word after `key` in a header (up to a space or the next marker), or "".
std::string_view word_after(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + key.size());
  return rest.substr(0, std::min(rest.find(' '), rest.find('<')));
}

// How many trailing characters of s could begin a marker ("<|...|>"): held back until the next piece.
size_t partial_marker(std::string_view s) {
  const size_t lt = s.rfind('<');
  if (lt == std::string_view::npos) return 0;
  const std::string_view tail = s.substr(lt);
  if (tail.size() > 1 && tail[1] != '|') return 0;
  return tail.find('>') == std::string_view::npos ? tail.size() : 0;
}

}  // namespace

HarmonyPart HarmonyStream::push(std::string_view text) {
  held_ += text;
  HarmonyPart out;
  run(out, false);
  return out;
}

HarmonyPart HarmonyStream::finish() {
  HarmonyPart out;
  run(out, true);
  if (in_body_) end_body(out);
  out.calls = std::move(calls_);
  return out;
}

void HarmonyStream::emit(HarmonyPart& out, std::string_view text) {
  switch (body_) {
    case Body::Reasoning: out.reasoning += text; break;
    case Body::Content: out.content += text; break;
    case Body::Call: args_ += text; break;
  }
}

void HarmonyStream::end_body(HarmonyPart& out) {
  in_body_ = false;
  if (body_ != Body::Call) return;
  const auto j = nlohmann::ordered_json::parse(args_, nullptr, false);
  if (!j.is_discarded() && j.is_object())
    calls_.push_back({new_call_id(ToolCallFormat::Harmony), name_, j.dump(-1, ' ', false,
                                                                          nlohmann::json::error_handler_t::replace)});
  else
    out.content += args_;  // not a call after all: nothing dropped
  args_.clear();
}

void HarmonyStream::run(HarmonyPart& out, bool end) {
  for (;;) {
    if (!in_body_) {
      const size_t at = held_.find(kMessage);
      if (at == std::string::npos) {
        // No header yet. Text with no marker at all is not harmony: content as it comes.
        if (held_.find("<|") == std::string::npos && held_.find(" to=") == std::string::npos && !held_.empty() &&
            held_.front() != '<' && held_.front() != ' ') {
          out.content += held_;
          held_.clear();
        } else if (end) {
          out.content += held_;  // a header never finished: what there is, as written
          held_.clear();
        }
        return;
      }
      const std::string_view header = std::string_view(held_).substr(0, at);
      const std::string_view channel = word_after(header, kChannel), to = word_after(header, "to=");
      if (to.rfind("functions.", 0) == 0) {
        body_ = Body::Call;
        name_ = std::string(to.substr(10));
      } else {
        body_ = channel == "analysis" ? Body::Reasoning : Body::Content;
      }
      held_.erase(0, at + kMessage.size());
      in_body_ = true;
      continue;
    }
    size_t stop = std::string::npos, len = 0;
    for (const std::string_view e : kBodyEnds)
      if (const size_t p = held_.find(e); p < stop) stop = p, len = e == "<|start|>" ? 0 : e.size();
    if (stop == std::string::npos) {
      const size_t keep = end ? 0 : partial_marker(held_);
      emit(out, std::string_view(held_).substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
    emit(out, std::string_view(held_).substr(0, stop));
    held_.erase(0, stop + len);
    end_body(out);
  }
}

}  // namespace kestrel
