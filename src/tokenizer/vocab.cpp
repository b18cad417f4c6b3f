#include "tokenizer/vocab.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"

namespace kestrel {

Vocab Vocab::from_gguf(const GgufFile& f) {
  Vocab v;
  const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model == "llama") v.kind = Kind::Spm;
  else if (model == "gpt2") v.kind = Kind::Bpe;
  else if (model == "gemma4") v.kind = Kind::Bpe, v.spm_style_bpe = true;
  else if (model.empty()) throw Error(fmt::format("{}: no tokenizer (missing 'tokenizer.ggml.model')", f.path()));
  else throw Error(fmt::format("{}: tokenizer model '{}' is not supported (supported: llama, gpt2, gemma4)", f.path(), model));
  // Gemma 4's rules whatever tokenizer.ggml.pre says (llama.cpp sets them from the model).
  v.pre = v.spm_style_bpe ? "gemma4" : f.get_string("tokenizer.ggml.pre").value_or("default");

  const GgufValue& toks = f.get("tokenizer.ggml.tokens");
  const auto& items = toks.as_array().items;
  if (items.empty()) throw Error(fmt::format("{}: 'tokenizer.ggml.tokens' is empty", f.path()));
  v.tokens.reserve(items.size());
  for (const auto& it : items) v.tokens.push_back(it.as_string());
  const auto n = v.tokens.size();

  v.scores.assign(n, 0.0f);
  if (const auto* s = f.find("tokenizer.ggml.scores")) {
    const auto& a = s->as_array().items;
    if (a.size() != n) throw Error(fmt::format("{}: {} scores for {} tokens", f.path(), a.size(), n));
    for (size_t i = 0; i < n; i++) v.scores[i] = static_cast<float>(a[i].as_double());
  }
  v.types.assign(n, TokenType::Normal);
  if (const auto* t = f.find("tokenizer.ggml.token_type")) {
    const auto& a = t->as_array().items;
    if (a.size() != n) throw Error(fmt::format("{}: {} token types for {} tokens", f.path(), a.size(), n));
    for (size_t i = 0; i < n; i++) v.types[i] = static_cast<TokenType>(a[i].as_int());
  }
  for (size_t i = 0; i < n; i++) v.token_to_id.emplace(v.tokens[i], static_cast<int32_t>(i));

  if (v.kind == Kind::Bpe) {
    const auto& merges = f.get("tokenizer.ggml.merges").as_array().items;
    v.merge_rank.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); i++) v.merge_rank.emplace(merges[i].as_string(), static_cast<int32_t>(i));
  }

  auto id_key = [&](const char* key, int32_t dflt) -> int32_t {
    const auto val = f.get_int(key);
    if (!val) return dflt;
    if (*val == 0xFFFFFFFFll || *val == -1) return -1;  // "none", as llama.cpp writes it
    if (*val < 0 || *val >= static_cast<int64_t>(n))
      throw Error(fmt::format("{}: '{}' = {} is outside the vocabulary of {} tokens", f.path(), key, *val, n));
    return static_cast<int32_t>(*val);
  };
  const bool spm = v.kind == Kind::Spm;
  v.bos = id_key("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  v.eos = id_key("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  v.unk = id_key("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  v.eot = id_key("tokenizer.ggml.eot_token_id", -1);
  // Fill-in-the-middle tokens: the file's, else the first of the texts the families spell them with.
  auto fim = [&](const char* key, const char* old_key, std::initializer_list<const char*> texts) {
    int32_t id = id_key(key, -1);
    if (id < 0 && old_key) id = id_key(old_key, -1);
    for (const char* t : texts)
      if (id < 0) id = v.find(t);
    return id;
  };
  v.fim_pre = fim("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id",
                  {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                   "<|code_prefix|>", "<|prefix|>"});
  v.fim_suf = fim("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id",
                  {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                   "<|code_suffix|>", "<|suffix|>"});
  v.fim_mid = fim("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id",
                  {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                   "<|code_middle|>", "<|middle|>"});
  v.fim_pad = fim("tokenizer.ggml.fim_pad_token_id", nullptr, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  v.fim_rep = fim("tokenizer.ggml.fim_rep_token_id", nullptr,
                  {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  v.fim_sep = fim("tokenizer.ggml.fim_sep_token_id", nullptr, {"<|file_sep|>"});
  // What ends a generation, as llama.cpp decides it: EOS, EOT, EOM, and any
  // token spelt as one of the families' end-of-turn markers, whether or not
  // the file names it (Llama 3.1 ends a tool call with <|eom_id|>; Qwen's
  // <|im_end|> is often not the file's EOT).
  static const char* const kEndMarkers[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                            "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<|return|>",
                                            "<|call|>", "<end_of_utterance>", "<eos>", "<turn|>",
                                            "<|tool_response>"};
  // (llama.cpp ends a generation at the FIM pad, repo and file-separator tokens too.)
  for (int32_t id : {v.eos, v.eot, id_key("tokenizer.ggml.eom_token_id", -1), v.fim_pad, v.fim_rep, v.fim_sep})
    if (id >= 0) v.end_of_generation.push_back(id);
  for (const char* marker : kEndMarkers)
    if (const int32_t id = v.find(marker); id >= 0) v.end_of_generation.push_back(id);
  // o200k_harmony (gpt-oss): <|end|> closes a message the reply goes on after (its analysis); <|return|>
  // and <|call|> end the reply. Where all three are present, <|end|> does not end generation (llama.cpp's rule).
  if (const int32_t end = v.find("<|end|>"); end >= 0 && v.find("<|return|>") >= 0 && v.find("<|call|>") >= 0)
    std::erase(v.end_of_generation, end);
  std::sort(v.end_of_generation.begin(), v.end_of_generation.end());
  v.end_of_generation.erase(std::unique(v.end_of_generation.begin(), v.end_of_generation.end()),
                            v.end_of_generation.end());
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || PreTokenizer::adds_bos_by_default(v.pre));
  if (PreTokenizer::never_adds_bos(v.pre)) v.add_bos = false;
  if (v.spm_style_bpe) v.add_bos = true;  // llama.cpp: Gemma 4 always starts with BOS, whatever add_bos_token says
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  if (v.add_bos && v.bos < 0) throw Error(fmt::format("{}: the tokenizer asks for BOS but has no BOS token", f.path()));
  return v;
}

}  // namespace kestrel
