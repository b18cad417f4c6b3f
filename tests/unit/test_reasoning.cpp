// The <think> splitter: DeepSeek-R1 (the template opens <think>), Qwen3/QwQ
// (the model writes it), no thinking at all, a reply cut while thinking —
// and the same answer whichever way the text is cut into streamed pieces.
#include <gtest/gtest.h>

#include <random>

#include "chat/reasoning.h"

namespace kestrel {
namespace {

SplitText all_at_once(bool open, const std::string& text, ReasoningTags tags = kThinkTags) {
  ReasoningSplitter s(open, tags);
  SplitText a = s.push(text), b = s.finish();
  return {a.reasoning + b.reasoning, a.content + b.content};
}

SplitText in_pieces(bool open, const std::string& text, uint32_t seed, ReasoningTags tags = kThinkTags) {
  std::mt19937 rng(seed);
  ReasoningSplitter s(open, tags);
  SplitText out;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min<size_t>(text.size() - at, 1 + rng() % 4);
    const SplitText part = s.push(std::string_view(text).substr(at, n));
    out.reasoning += part.reasoning;
    out.content += part.content;
    at += n;
  }
  const SplitText end = s.finish();
  return {out.reasoning + end.reasoning, out.content + end.content};
}

void expect_split(bool open, const std::string& text, const std::string& reasoning, const std::string& content,
                  ReasoningTags tags = kThinkTags) {
  const SplitText whole = all_at_once(open, text, tags);
  EXPECT_EQ(whole.reasoning, reasoning) << text;
  EXPECT_EQ(whole.content, content) << text;
  for (uint32_t seed = 0; seed < 50; seed++) {
    const SplitText cut = in_pieces(open, text, seed, tags);
    ASSERT_EQ(cut.reasoning, reasoning) << text << " (pieces, seed " << seed << ")";
    ASSERT_EQ(cut.content, content) << text << " (pieces, seed " << seed << ")";
  }
}

TEST(Reasoning, DeepSeekR1ThinksInsideTheTemplatesOpenThinkTag) {
  expect_split(true, "Okay, 2+2.\nIt is 4.\n</think>\n\nThe answer is **4**.", "Okay, 2+2.\nIt is 4.",
               "The answer is **4**.");
  expect_split(true, "\n<think>\nfirst\n</think>\n\nanswer", "first", "answer");  // its own <think> too
  expect_split(true, "still thinking when the tokens ran ou", "still thinking when the tokens ran ou", "");
  expect_split(true, "</think>just the answer", "", "just the answer");
}

TEST(Reasoning, Qwen3WritesItsOwnThinkTag) {
  expect_split(false, "<think>\nLet me see: a < b, so </thin is not a tag.\n</think>\n\nYes.",
               "Let me see: a < b, so </thin is not a tag.", "Yes.");
  expect_split(false, "<think>\n\n</think>\n\nHi there", "", "Hi there");
}

TEST(Reasoning, ARepliesWithoutThinkingStayContentExactly) {
  expect_split(false, "Hello <think> is just text here", "", "Hello <think> is just text here");
  expect_split(false, "\n\nIndented answer", "", "\n\nIndented answer");
  expect_split(false, "<thi", "", "<thi");
  expect_split(false, "<", "", "<");
}

// Mistral's reasoning models (Magistral, Ministral 3 Reasoning) think in [THINK]...[/THINK]; the tags come
// from the template, which shows them.
TEST(Reasoning, MistralThinksBetweenItsOwnTags) {
  expect_split(false, "[THINK]2 and 2 [make] 4.[/THINK]It is 4.", "2 and 2 [make] 4.", "It is 4.", kMistralThinkTags);
  expect_split(false, "No thinking, <think> is text", "", "No thinking, <think> is text", kMistralThinkTags);
  expect_split(false, "[THINK]cut short", "cut short", "", kMistralThinkTags);
  EXPECT_EQ(reasoning_tags_of("{{- '[THINK]' + block['thinking'] + '[/THINK]' }}").open, "[THINK]");
  EXPECT_EQ(reasoning_tags_of("{{ '<think>' }}").close, "</think>");
}

// Gemma 4 thinks in its thought channel: <|channel>thought ... <channel|>; its template shows the tags.
TEST(Reasoning, Gemma4ThinksInItsThoughtChannel) {
  expect_split(false, "<|channel>thought\nLet me add: 2+2=4.\n<channel|>It is 4.", "Let me add: 2+2=4.", "It is 4.",
               kGemma4ThinkTags);
  expect_split(false, "It is 4.", "", "It is 4.", kGemma4ThinkTags);
  EXPECT_EQ(reasoning_tags_of("{{- '<|channel>thought\n' + thinking_text + '\n<channel|>' -}}").close, "<channel|>");
  // Thinking off: the generation prompt closes an empty thought, the reply starts as content.
  EXPECT_FALSE(prompt_opens_reasoning("<|turn>model\n<|channel>thought\n<channel|>", kGemma4ThinkTags));
}

TEST(Reasoning, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // Qwen3 thinking off
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

}  // namespace
}  // namespace kestrel
