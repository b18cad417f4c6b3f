// The GBNF compiler and matcher, the token mask over a small vocabulary, and
// the JSON-schema converter's refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "chat/tool_call_grammar.h"
#include "chat/tool_calls.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/grammar_source.h"
#include "grammar/grammar_stacks.h"
#include "grammar/json_schema_grammar.h"
#include "grammar/token_constraint.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

// Does the grammar match the whole text? (code point by code point)
bool matches(const Grammar& g, const std::string& text) {
  GrammarStacks st = grammar_start(g), next;
  for (size_t i = 0; i < text.size();) {
    grammar_advance(g, st, utf8_next(text, i), next);
    if (next.empty()) return false;
    st.swap(next);
  }
  return grammar_complete(st);
}

std::string parse_error(const std::string& gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "(parsed)";
}

TEST(Grammar, LiteralsClassesAndRepetitions) {
  const Grammar g = Grammar::parse(R"(
# a comment line
root ::= greeting " " name{1,2} tail?   # trailing comment
greeting ::= "hi" | "hello"
  | "hey"
name ::= [A-Z] [a-z]*
tail ::= "!"+ | [^a-z!] .
)");
  EXPECT_TRUE(matches(g, "hi Ann"));
  EXPECT_TRUE(matches(g, "hey AnnBo!!!"));
  EXPECT_TRUE(matches(g, "hello X"));
  EXPECT_TRUE(matches(g, "hello X7é"));  // [^a-z!] then any character
  EXPECT_FALSE(matches(g, "hello"));
  EXPECT_FALSE(matches(g, "hi ann"));
  EXPECT_TRUE(matches(g, "hi AnnBoCy"));    // two names, then "Cy" as [^a-z!] .
  EXPECT_FALSE(matches(g, "hi AnnBoCyDe"));  // name{1,2}
  EXPECT_FALSE(matches(g, "hi Ann!x"));
  EXPECT_FALSE(matches(g, "howdy Ann"));
}

TEST(Grammar, ExactAndOpenCountsGroupsAndEscapes) {
  const Grammar g = Grammar::parse(R"(root ::= ("ab" | [0-9]){3} "-" [xy]{2,} "-" "q"{,2} "\x41\u00e9\n\"\\" [\]\-])");
  EXPECT_TRUE(matches(g, "ab1ab-xyx-Aé\n\"\\]"));
  EXPECT_TRUE(matches(g, "123-xx-qq-Aé\n\"\\-") == false);  // the class has ] and -, but "-" ends "q"{,2}
  EXPECT_TRUE(matches(g, "123-xx-qqAé\n\"\\-"));
  EXPECT_FALSE(matches(g, "12-xx-Aé\n\"\\]"));
  EXPECT_FALSE(matches(g, "123-x-Aé\n\"\\]"));
  EXPECT_FALSE(matches(g, "123-xx-qqqAé\n\"\\]"));
}

TEST(Grammar, RecursionThroughACharacterIsFine) {
  const Grammar g = Grammar::parse("root ::= \"(\" root \")\" | \"x\"");
  EXPECT_TRUE(matches(g, "((x))"));
  EXPECT_FALSE(matches(g, "((x)"));
}

TEST(Grammar, ErrorsNameTheLineTheRuleOrTheCycle) {
  EXPECT_THAT(parse_error("root ::= item\n"), HasSubstr("rule 'item' is used but never defined"));
  EXPECT_THAT(parse_error("start ::= \"a\"\n"), HasSubstr("no rule 'root'"));
  EXPECT_THAT(parse_error("root ::= \"a\"\nroot ::= \"b\"\n"), HasSubstr("defined twice"));
  EXPECT_THAT(parse_error("root ::= \"a\"\n\nx ::= \"abc\n"), HasSubstr("line 3"));
  EXPECT_THAT(parse_error("root ::= [ab\n"), HasSubstr("unterminated character class"));
  EXPECT_THAT(parse_error("root ::= \"a\" )"), HasSubstr("unexpected ')'"));
  EXPECT_THAT(parse_error("root ::= \"a\"{5000}"), HasSubstr("at most 4096"));
  EXPECT_THAT(parse_error("root ::= \"a\"{3,2}"), HasSubstr("maximum is below the minimum"));
  EXPECT_THAT(parse_error("root ::= \"\\q\""), HasSubstr("unknown escape"));
  EXPECT_THAT(parse_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""), HasSubstr("left recursion (expr -> expr)"));
  // Through a rule that may match nothing, and a repetition of something empty.
  EXPECT_THAT(parse_error("root ::= a\na ::= b a \"x\" | \"y\"\nb ::= \"z\"?"), HasSubstr("left recursion"));
  EXPECT_THAT(parse_error("root ::= (\"\")*"), HasSubstr("left recursion"));
}

// A SentencePiece vocabulary: controls, characters, longer pieces, byte tokens.
std::unique_ptr<Tokenizer> small_tokenizer() {
  Vocab v;
  auto add = [&](const std::string& piece, TokenType type) {
    v.token_to_id[piece] = v.size();
    v.tokens.push_back(piece);
    v.scores.push_back(0.0f);
    v.types.push_back(type);
  };
  add("<unk>", TokenType::Unknown);
  add("<s>", TokenType::Control);
  add("</s>", TokenType::Control);
  v.unk = 0, v.bos = 1, v.eos = 2;
  for (const char* p : {"{", "}", "\"", ":", ",", "a", "b", "ab", "\"a", "\"}", "▁", "▁{", "1", "12", "é", "[", "]"})
    add(p, TokenType::Normal);
  for (int b = 0; b < 256; b++) add(fmt::format("<0x{:02X}>", b), TokenType::Byte);
  add("[TOOL_CALLS]", TokenType::Control);  // Mistral's call marker
  return std::make_unique<SpmTokenizer>(std::move(v));
}

std::vector<std::string> allowed_pieces(TokenConstraint& c, const Tokenizer& tok) {
  const int64_t n = tok.vocab().size();
  std::vector<float> logits(static_cast<size_t>(n) + 3, 0.0f);  // 3 padded rows past the vocabulary
  c.mask(logits.data(), static_cast<int64_t>(logits.size()));
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; i++)
    if (std::isfinite(logits[i])) out.push_back(tok.vocab().tokens[i]);
  for (size_t i = static_cast<size_t>(n); i < logits.size(); i++) EXPECT_TRUE(std::isinf(logits[i]));
  return out;
}

TEST(TokenConstraint, MasksByTheBytesEachTokenAddsAndEndsOnlyWhenComplete) {
  auto tok = small_tokenizer();
  auto vocab = std::make_shared<GrammarVocab>(*tok);
  TokenConstraint c(compile_gbnf(R"(root ::= "{" ("\"" [ab]+ "\"")? "}")", "test"), vocab);
  EXPECT_THAT(allowed_pieces(c, *tok), ::testing::UnorderedElementsAre("{", "<0x7B>"));
  ASSERT_TRUE(c.accept(tok->vocab().find("{")));
  EXPECT_THAT(allowed_pieces(c, *tok), ::testing::UnorderedElementsAre("}", "\"", "\"a", "<0x7D>", "<0x22>"));
  EXPECT_FALSE(c.accept(tok->vocab().find("a")));  // refused: the state stays
  ASSERT_TRUE(c.accept(tok->vocab().find("\"a")));
  EXPECT_THAT(allowed_pieces(c, *tok),
              ::testing::UnorderedElementsAre("\"", "\"}", "a", "b", "ab", "<0x22>", "<0x61>", "<0x62>"));
  EXPECT_FALSE(c.complete());
  ASSERT_TRUE(c.accept(tok->vocab().find("\"}")));
  // Matched: only the end of generation (EOS; BOS, which also ends a generation here).
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(c.finished());
  EXPECT_THAT(allowed_pieces(c, *tok), ::testing::UnorderedElementsAre("<s>", "</s>"));
}

TEST(TokenConstraint, ACharacterSplitAcrossByteTokensIsFollowedToItsEnd) {
  auto tok = small_tokenizer();
  auto vocab = std::make_shared<GrammarVocab>(*tok);
  TokenConstraint c(compile_gbnf(R"(root ::= "é" [a-z])", "test"), vocab);  // é = C3 A9
  EXPECT_THAT(allowed_pieces(c, *tok), ::testing::UnorderedElementsAre("é", "<0xC3>"));
  ASSERT_TRUE(c.accept(tok->vocab().find("<0xC3>")));
  EXPECT_THAT(allowed_pieces(c, *tok), ::testing::UnorderedElementsAre("<0xA9>"));
  ASSERT_TRUE(c.accept(tok->vocab().find("<0xA9>")));
  EXPECT_THAT(allowed_pieces(c, *tok), ::testing::UnorderedElementsAre("a", "b", "<0x61>", "<0x62>",
                                                                   "<0x63>", "<0x64>", "<0x65>", "<0x66>", "<0x67>",
                                                                   "<0x68>", "<0x69>", "<0x6A>", "<0x6B>", "<0x6C>",
                                                                   "<0x6D>", "<0x6E>", "<0x6F>", "<0x70>", "<0x71>",
                                                                   "<0x72>", "<0x73>", "<0x74>", "<0x75>", "<0x76>",
                                                                   "<0x77>", "<0x78>", "<0x79>", "<0x7A>"));
}

TEST(TokenConstraint, AControlTokenIsAllowedOnlyToARequestThatShowsIt) {
  auto tok = small_tokenizer();
  auto vocab = std::make_shared<GrammarVocab>(*tok);
  const auto grammar = compile_gbnf(R"(root ::= "[TOOL_CALLS]" "a")", "test");
  const int32_t marker = tok->vocab().find("[TOOL_CALLS]");
  TokenConstraint hidden(grammar, vocab);
  EXPECT_THAT(allowed_pieces(hidden, *tok), ::testing::UnorderedElementsAre("[", "<0x5B>"));  // spelt out
  EXPECT_FALSE(hidden.accept(marker));
  TokenConstraint shown(grammar, vocab, {marker});
  EXPECT_THAT(allowed_pieces(shown, *tok), ::testing::UnorderedElementsAre("[TOOL_CALLS]", "[", "<0x5B>"));
  ASSERT_TRUE(shown.accept(marker));
  EXPECT_THAT(allowed_pieces(shown, *tok), ::testing::UnorderedElementsAre("a", "<0x61>"));
}

TEST(TokenConstraint, OverlongEncodingsAndSurrogatesAreNotText) {
  auto tok = small_tokenizer();
  auto vocab = std::make_shared<GrammarVocab>(*tok);
  // Any character: still not '{' spelt as C1 BB or F0 80 81 BB, nor a surrogate ED A0 80.
  TokenConstraint c(compile_gbnf("root ::= .", "test"), vocab);
  for (const char* bad : {"<0xC0>", "<0xC1>", "<0x80>", "<0xBF>", "<0xF8>", "<0xFF>"})
    EXPECT_FALSE(c.allows(tok->vocab().find(bad))) << bad;
  EXPECT_TRUE(c.allows(tok->vocab().find("<0xF0>")));
  ASSERT_TRUE(c.accept(tok->vocab().find("<0xF0>")));
  EXPECT_FALSE(c.allows(tok->vocab().find("<0x80>")));  // F0 80 .. would be overlong
  EXPECT_TRUE(c.allows(tok->vocab().find("<0x90>")));
  TokenConstraint d(compile_gbnf("root ::= .", "test"), vocab);
  ASSERT_TRUE(d.accept(tok->vocab().find("<0xED>")));
  EXPECT_TRUE(d.allows(tok->vocab().find("<0x9F>")));
  EXPECT_FALSE(d.allows(tok->vocab().find("<0xA0>")));  // ED A0..BF: surrogates
}

// The trie walk (mask) and the byte-by-byte path (accept) must agree on
// every token in every state a random walk reaches, and every walk that ends
// must be JSON of the schema's shape.
TEST(TokenConstraint, MaskAgreesWithAcceptAlongRandomWalks) {
  auto tok = small_tokenizer();
  auto vocab = std::make_shared<GrammarVocab>(*tok);
  const auto grammar = compile_json_schema(nlohmann::ordered_json::parse(R"({
      "type": "object", "properties": {"a": {"type": "array", "items": {"enum": [1, 12, "ab"]}, "maxItems": 3},
                                       "b": {"type": "string", "maxLength": 4}}, "required": ["b"]})"),
                                           "test");
  std::mt19937 rng(7);
  int ended = 0;
  for (int walk = 0; walk < 40; walk++) {
    TokenConstraint c(grammar, vocab);
    std::string text;
    for (int step = 0; step < 200; step++) {
      std::vector<float> logits(static_cast<size_t>(tok->vocab().size()), 0.0f);
      c.mask(logits.data(), static_cast<int64_t>(logits.size()));
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < tok->vocab().size(); t++) {
        const bool by_mask = std::isfinite(logits[t]);
        ASSERT_EQ(by_mask, c.would_accept(t)) << "token " << tok->vocab().tokens[t] << " after '" << text << "'";
        if (by_mask) ok.push_back(t);
      }
      ASSERT_FALSE(ok.empty()) << text;
      const int32_t t = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      if (vocab->is_end(t)) {
        ended++;
        const auto j = nlohmann::json::parse(text);  // throws if not JSON
        ASSERT_TRUE(j.is_object());
        ASSERT_TRUE(j.contains("b") && j["b"].is_string()) << text;
        const std::string b = j["b"].get<std::string>();
        size_t chars = 0;
        for (size_t i = 0; i < b.size(); chars++) utf8_next(b, i);
        ASSERT_LE(chars, 4u) << text;  // maxLength counts characters
        break;
      }
      ASSERT_TRUE(c.accept(t));
      text += vocab->bytes(t);
    }
  }
  EXPECT_GT(ended, 10);  // most walks do reach the end
}

// For every format: random walks through the call grammar end in text the
// reply parser reads back as calls to the allowed tools, with arguments of
// their schemas.
TEST(ToolCallGrammar, EveryFormatsCallsParseBackWithSchemaArguments) {
  auto tok = small_tokenizer();
  auto vocab = std::make_shared<GrammarVocab>(*tok);
  const auto tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}, "note": {"type": "string"}},
      "required": ["unit", "days"],
      "additionalProperties": false}}},
    {"type": "function", "function": {"name": "ping"}}])");
  std::mt19937 rng(11);
  for (ToolCallFormat format :
       {ToolCallFormat::Hermes, ToolCallFormat::Llama3Json, ToolCallFormat::DeepSeek, ToolCallFormat::Mistral,
        ToolCallFormat::Dsml, ToolCallFormat::Harmony, ToolCallFormat::Glm, ToolCallFormat::Gemma4}) {
    int read_back = 0;  // walks that ended, every one read back as calls
    for (const char* only : {"", "get_weather"}) {
      for (bool parallel : {false, true}) {
        const auto grammar = compile_gbnf(tool_call_gbnf(format, tools, only, parallel), "tools");
        for (int walk = 0; walk < 8; walk++) {
          TokenConstraint c(grammar, vocab);
          std::string text;
          bool ended = false;
          for (int step = 0; step < 400 && !ended; step++) {
            std::vector<float> logits(static_cast<size_t>(tok->vocab().size()), 0.0f);
            c.mask(logits.data(), static_cast<int64_t>(logits.size()));
            std::vector<int32_t> ok;
            for (int32_t t = 0; t < tok->vocab().size(); t++)
              if (std::isfinite(logits[t])) ok.push_back(t);
            ASSERT_FALSE(ok.empty()) << text;
            // Ending when it may keeps the walks short; otherwise any allowed token.
            const auto end = std::find_if(ok.begin(), ok.end(), [&](int32_t t) { return vocab->is_end(t); });
            const int32_t t = end != ok.end() && rng() % 2 ? *end : ok[rng() % ok.size()];
            if (vocab->is_end(t)) {
              ended = true;
              break;
            }
            ASSERT_TRUE(c.accept(t));
            text += vocab->bytes(t);
          }
          if (!ended) continue;  // a long number or string: not this walk
          read_back++;
          const ToolCallReply reply = parse_tool_calls(format, text);
          const std::string what = std::string(tool_call_format_name(format)) + ": " + text;
          ASSERT_FALSE(reply.calls.empty()) << what;
          EXPECT_FALSE(reply.content.has_value()) << what;
          if (!parallel) {
            EXPECT_EQ(reply.calls.size(), 1u) << what;
          }
          for (const ToolCall& call : reply.calls) {
            if (*only) {
              EXPECT_EQ(call.name, only) << what;
            }
            const auto args = nlohmann::json::parse(call.arguments);
            if (call.name == "get_weather") {
              EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << what;
              EXPECT_TRUE(args["days"].is_number_integer()) << what;
              if (args.contains("note")) {
                EXPECT_TRUE(args["note"].is_string()) << what;
              }
            } else {
              EXPECT_EQ(call.name, "ping") << what;
              EXPECT_TRUE(args.is_object()) << what;
            }
          }
        }
      }
    }
    EXPECT_GT(read_back, 8) << tool_call_format_name(format);
  }
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotEnforceNamingTheKeywordAndPlace) {
  auto refusal = [](const char* schema) {
    try {
      json_schema_to_gbnf(nlohmann::ordered_json::parse(schema));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(converted)");
  };
  EXPECT_THAT(refusal(R"({"type":"string","pattern":"^a+$"})"), HasSubstr("at #: keyword 'pattern' is not supported"));
  EXPECT_THAT(refusal(R"({"properties":{"n":{"type":"integer","minimum":3}}})"),
              HasSubstr("at #/properties/n: keyword 'minimum'"));
  EXPECT_THAT(refusal(R"({"allOf":[{"type":"string"}]})"), HasSubstr("'allOf'"));
  EXPECT_THAT(refusal(R"({"type":"strng"})"), HasSubstr("unknown type 'strng'"));
  EXPECT_THAT(refusal(R"({"$ref":"#/$defs/missing"})"), HasSubstr("points at nothing"));
  EXPECT_THAT(refusal(R"({"$ref":"http://example.com/s.json"})"), HasSubstr("only references inside the schema"));
  EXPECT_THAT(refusal(R"({"type":"array","minItems":3,"maxItems":2})"), HasSubstr("maxItems is below minItems"));
  EXPECT_THAT(refusal("false"), HasSubstr("allows no value"));
  // Annotations change nothing and are accepted.
  EXPECT_EQ(refusal(R"({"title":"t","description":"d","type":"boolean","default":true,"examples":[false]})"),
            "(converted)");
}

TEST(JsonSchemaGrammar, ShapesAreMatchedExactly) {
  auto g = [](const char* schema) { return Grammar::parse(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema))); };
  const Grammar obj = g(R"({"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"boolean"},
                            "z":{"type":"null"}},"required":["y"],"additionalProperties":false})");
  EXPECT_TRUE(matches(obj, R"({"y":true})"));
  EXPECT_TRUE(matches(obj, R"({ "x": -12, "y": false, "z": null })"));
  EXPECT_TRUE(matches(obj, "{\n  \"y\": true,\n  \"z\": null\n}"));
  EXPECT_FALSE(matches(obj, R"({"x":1})"));           // y is required
  EXPECT_FALSE(matches(obj, R"({"y":true,"x":1})"));  // the schema's order
  EXPECT_FALSE(matches(obj, R"({"x":01,"y":true})"));
  EXPECT_FALSE(matches(obj, R"({,"y":true})"));
  const Grammar arr = g(R"({"type":"array","prefixItems":[{"const":"a"}],"items":{"type":"number"},"minItems":2,"maxItems":3})");
  EXPECT_TRUE(matches(arr, R"(["a",1.5e3])"));
  EXPECT_TRUE(matches(arr, R"(["a", 1, -0.25])"));
  EXPECT_FALSE(matches(arr, R"(["a"])"));
  EXPECT_FALSE(matches(arr, R"(["a",1,2,3])"));
  EXPECT_FALSE(matches(arr, R"([1,2])"));
  const Grammar str = g(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(matches(str, R"("a\"")"));
  EXPECT_TRUE(matches(str, R"("\u00e9ab")"));
  EXPECT_FALSE(matches(str, R"("a")"));
  EXPECT_FALSE(matches(str, R"("abcd")"));
  EXPECT_FALSE(matches(str, "\"a\nb\""));  // a raw control character
  const Grammar tree = g(R"({"$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},
                             "$ref":"#/$defs/node"})");
  EXPECT_TRUE(matches(tree, R"({"kids":[{},{"kids":[{"kids":[]}]}]})"));
  EXPECT_FALSE(matches(tree, R"({"kids":[1]})"));
}

}  // namespace
}  // namespace kestrel
