#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <map>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: marks (\p{M}) stay with the letters they modify.
const char* const kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o (o200k): cased words, contractions attached, digits in threes.
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's Tekken: GPT-4o's cased words without contractions, single digits.
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kSeedCoder =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kBailing =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const kBloom = R"( ?[^(\s|.,!?…。，、।۔،)]+)";
const char* const kCjk = "[一-龥ࠀ-一가-퟿]+";

struct RuleSet {
  std::vector<std::string> patterns;
  bool ignore_merges = false;  // a word that is itself a token is emitted whole
  bool add_bos = false;        // BOS unless tokenizer.ggml.add_bos_token says otherwise
  bool never_bos = false;      // no BOS whatever the file says (llama.cpp drops GLM-4's: its template writes one)
};

// The rule sets as the models' tokenizer.json files define them, under every
// tokenizer.ggml.pre name llama.cpp's converter writes for them.
const std::map<std::string, RuleSet>& rule_sets() {
  static const std::map<std::string, RuleSet> sets = [] {
    std::map<std::string, RuleSet> m;
    auto add = [&](std::initializer_list<const char*> names, const RuleSet& r) {
      for (const char* n : names) m.emplace(n, r);
    };
    add({"gpt-2", "gpt2", "mpt", "olmo", "phi-2", "jais", "trillion", "granite-docling", "exaone4", "roberta-bpe",
         "jina-v1-en", "jina-v2-code", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "gigachat", "a.x-4.0",
         "mellum"},
        {{kGpt2}});
    // Digits one by one, then GPT-2's rules.
    add({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {{R"(\p{N})", kGpt2}});
    add({"default"}, {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}});
    add({"falcon"}, {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}});
    add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
        {{kLlama3}, true, true});
    add({"dbrx", "smaug-bpe"}, {{kLlama3}});
    // GLM-4/4.5/5 (llama.cpp's CHATGLM4 regex: Llama 3's with the contractions' cases spelled out); llama.cpp
    // sets no BOS for these whatever add_bos_token says ([gMASK]<sop> come from the chat template).
    add({"glm4", "chatglm-bpe"},
        {{R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
         false, false, true});
    add({"qwen2", "deepseek-r1-qwen", "megrez", "kormo", "stablelm2", "hunyuan", "grok-2"}, {{kQwen2}});
    add({"qwen35"}, {{kQwen35}});
    add({"gpt-4o", "llama4", "minimax-m2"}, {{kGpt4o}});
    add({"tekken"}, {{kTekken}, true, true});
    // Gemma 4 (SentencePiece-style BPE over the whole text): runs of newlines apart from the rest, nothing else.
    add({"gemma4"}, {{"[^\n]+|[\n]+"}, false, true});
    add({"seed-coder"}, {{kSeedCoder}});
    add({"bailingmoe", "bailingmoe2", "llada-moe"}, {{kBailing}});
    add({"poro-chat", "bloom", "gpt3-finnish"}, {{kBloom}});
    add({"viking"}, {{kBloom, R"(\p{N})"}});
    add({"deepseek-llm"},
        {{"[\r\n]",
          // Cased letters (Unicode L&), written as code points so that no editor
          // can normalise them (NFC maps e.g. U+2126 OHM SIGN to U+03A9).
          "\\s?["
          "A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}\\x{295}"
          "-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}"
          "\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}"
          "\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}"
          "-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-"
          "\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}"
          "-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}"
          "-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}"
          "-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}"
          "\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}"
          "\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}\\x{a78b}"
          "-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-"
          "\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}"
          "-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}"
          "]+",
          "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, "\\p{N}+"}});
    add({"deepseek-coder"}, {{"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}});
    add({"deepseek-v3", "hunyuan-dense"},
        {{R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
          R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}});
    return m;
  }();
  return sets;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre) {
  const auto& sets = rule_sets();
  auto it = sets.find(pre);
  if (it == sets.end()) {
    std::string names;
    for (const auto& [k, v] : sets) names += (names.empty() ? "" : ", ") + k;
    throw Error(fmt::format("BPE pre-tokenizer '{}' is not supported (supported: {})", pre, names));
  }
  ignore_merges_ = it->second.ignore_merges;
  for (const std::string& pattern : it->second.patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &err_off,
                            nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(fmt::format("pre-tokenizer '{}': regex does not compile at {}: {}", pre, err_off,
                              reinterpret_cast<const char*>(msg)));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional speed-up; interpreted matching works too
    regexes_.push_back(std::move(c));
  }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;

bool PreTokenizer::adds_bos_by_default(const std::string& pre) {
  auto it = rule_sets().find(pre);
  return it != rule_sets().end() && it->second.add_bos;
}

bool PreTokenizer::never_adds_bos(const std::string& pre) {
  auto it = rule_sets().find(pre);
  return it != rule_sets().end() && it->second.never_bos;
}

std::vector<std::string> PreTokenizer::known_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : rule_sets()) names.push_back(k);
  return names;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const auto& re : regexes_) {
    std::vector<std::string_view> next;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t offset = 0, last = 0;
      while (offset < piece.size()) {
        const int rc = pcre2_match(re->code, subject, piece.size(), offset, 0, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // empty match: step over one character
          size_t p = ms;
          utf8_next(piece, p);
          offset = p;
          continue;
        }
        if (ms > last) next.push_back(piece.substr(last, ms - last));
        next.push_back(piece.substr(ms, me - ms));
        last = offset = me;
      }
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace kestrel
