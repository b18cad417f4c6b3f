#pragma once
// Splits a reasoning model's reply into its thinking and its answer, as
// vLLM's and llama.cpp's DeepSeek reasoning parsers do: what stands between
// <think> and </think> (Mistral's reasoning models: [THINK] and [/THINK]) is
// reasoning_content, the rest content. Works on text
// as it streams: a tag split across two pieces is held back until it is
// whole, and the whitespace around the tags is trimmed (R1 writes
// "<think>\n...\n</think>\n\n").
#include <string>
#include <string_view>

namespace kestrel {

struct SplitText {
  std::string reasoning, content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

// The tags a family's reasoning is written between.
struct ReasoningTags {
  std::string_view open = "<think>", close = "</think>";
};
inline constexpr ReasoningTags kThinkTags{};
inline constexpr ReasoningTags kMistralThinkTags{"[THINK]", "[/THINK]"};  // Magistral, Ministral 3 Reasoning
inline constexpr ReasoningTags kGemma4ThinkTags{"<|channel>thought", "<channel|>"};  // Gemma 4's thought channel
// The tags a chat template writes reasoning with ([THINK] or Gemma 4's channel where it shows them, else <think>).
ReasoningTags reasoning_tags_of(std::string_view template_source);

class ReasoningSplitter {
 public:
  // starts_in_reasoning: the prompt left a <think> open (DeepSeek-R1's
  // template ends with "<think>\n"), so the reply begins inside it.
  explicit ReasoningSplitter(bool starts_in_reasoning, ReasoningTags tags = kThinkTags);
  // The next piece of generated text; returns what can be released.
  SplitText push(std::string_view text);
  // The end of the reply: everything held back. A <think> never closed
  // leaves all of it reasoning (a reply cut short while thinking).
  SplitText finish();

 private:
  enum class State { Start, Reasoning, Content };
  void run(SplitText& out);
  State state_;
  ReasoningTags tags_;
  std::string pending_;
  bool reasoning_started_ = false;  // leading whitespace of the reasoning is dropped until then
  bool content_started_ = false;    // likewise for the answer after </think>
};

// Whether a rendered prompt ends inside an open <think> (whitespace after it allowed).
bool prompt_opens_reasoning(std::string_view prompt, ReasoningTags tags = kThinkTags);

}  // namespace kestrel
