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
const char* const kCjk = "[一-龥ࠀ-一가-퟿]+";

// The rule sets, as the models' tokenizer.json files define them.
const std::map<std::string, std::vector<std::string>>& rule_sets() {
  static const std::map<std::string, std::vector<std::string>> sets = {
      {"gpt-2", {kGpt2}},
      {"gpt2", {kGpt2}},
      {"mpt", {kGpt2}},
      {"olmo", {kGpt2}},
      {"starcoder", {R"(\p{N})", kGpt2}},
      {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {"llama3", {kLlama3}},
      {"llama-bpe", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"deepseek-llm",
       {"[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-"
        "ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ\\x{10400}-\\x{1044f}"
        "𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, "\\p{N}+"}},
      {"deepseek-coder", {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"}},
      {"deepseek-v3",
       {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
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
  ignore_merges_ = (pre == "llama3" || pre == "llama-bpe");
  for (const std::string& pattern : it->second) {
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
