#include "chat/reasoning.h"

#include <algorithm>

namespace kestrel {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of s that is a proper prefix of tag.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; n--)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) i++;
  return i;
}

}  // namespace

ReasoningTags reasoning_tags_of(std::string_view src) {
  if (src.find(kMistralThinkTags.open) != std::string_view::npos) return kMistralThinkTags;
  if (src.find(kGemma4ThinkTags.open) != std::string_view::npos) return kGemma4ThinkTags;
  return kThinkTags;
}

ReasoningSplitter::ReasoningSplitter(bool starts_in_reasoning, ReasoningTags tags)
    : state_(starts_in_reasoning ? State::Reasoning : State::Start), tags_(tags) {}

SplitText ReasoningSplitter::push(std::string_view text) {
  pending_ += text;
  SplitText out;
  run(out);
  return out;
}

void ReasoningSplitter::run(SplitText& out) {
  const std::string_view kOpen = tags_.open, kClose = tags_.close;
  for (;;) {
    if (state_ == State::Start) {
      const size_t ws = leading_space(pending_);
      const std::string_view rest = std::string_view(pending_).substr(ws);
      if (rest.substr(0, kOpen.size()) == kOpen) {
        pending_.erase(0, ws + kOpen.size());
        state_ = State::Reasoning;
        continue;
      }
      if (rest.empty() || kOpen.substr(0, rest.size()) == rest) return;  // could still become <think>
      state_ = State::Content;
      content_started_ = true;  // no thinking: the reply is kept exactly
      continue;
    }
    if (state_ == State::Reasoning) {
      if (!reasoning_started_) {
        pending_.erase(0, leading_space(pending_));
        // R1 sometimes writes its own <think> after the template's.
        if (pending_.empty() || (pending_.size() < kOpen.size() && kOpen.substr(0, pending_.size()) == pending_)) return;
        if (std::string_view(pending_).substr(0, kOpen.size()) == kOpen) {
          pending_.erase(0, kOpen.size());
          continue;
        }
      }
      const size_t close = pending_.find(kClose);
      if (close != std::string::npos) {
        std::string_view thought = std::string_view(pending_).substr(0, close);
        while (!thought.empty() && is_space(thought.back())) thought.remove_suffix(1);
        out.reasoning += thought;
        pending_.erase(0, close + kClose.size());
        state_ = State::Content;
        continue;
      }
      // Release all but a possible "</th" and trailing whitespace (trimmed if </think> follows).
      size_t keep = partial_tag_suffix(pending_, kClose);
      size_t end = pending_.size() - keep;
      while (end > 0 && is_space(pending_[end - 1])) end--;
      if (end > 0) {
        reasoning_started_ = true;
        out.reasoning.append(pending_, 0, end);
        pending_.erase(0, end);
      }
      return;
    }
    // Content
    if (!content_started_) {
      pending_.erase(0, leading_space(pending_));
      if (pending_.empty()) return;
      content_started_ = true;
    }
    out.content += pending_;
    pending_.clear();
    return;
  }
}

SplitText ReasoningSplitter::finish() {
  SplitText out;
  run(out);
  if (state_ == State::Reasoning) {
    std::string_view rest = pending_;
    while (!rest.empty() && is_space(rest.back())) rest.remove_suffix(1);
    if (!reasoning_started_) rest.remove_prefix(leading_space(rest));
    out.reasoning += rest;
  } else {
    out.content += pending_;  // a reply that was only the start of "<think>"
  }
  pending_.clear();
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt, ReasoningTags tags) {
  const std::string_view kOpen = tags.open;
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.size() >= kOpen.size() && prompt.substr(prompt.size() - kOpen.size()) == kOpen;
}

}  // namespace kestrel
