// llama.cpp's tokenization of texts with a vocabulary file, its pre-tokenizer replaced
// (tokenizer.ggml.pre overridden): what tests/compat/pretok_cells.py records.
//   tokenize_oracle VOCAB.gguf PRE < texts.json  ->  [[ids...], ...] on stdout
// texts.json: a JSON array of strings. No BOS/EOS, special-token text as plain text.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "llama.h"

namespace {

// The JSON strings of an array (enough JSON for what the recorder writes: json.dumps with ensure_ascii).
std::vector<std::string> read_strings(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  auto utf8 = [](std::string& o, unsigned cp) {
    if (cp < 0x80) o += static_cast<char>(cp);
    else if (cp < 0x800) o += static_cast<char>(0xC0 | (cp >> 6)), o += static_cast<char>(0x80 | (cp & 63));
    else if (cp < 0x10000)
      o += static_cast<char>(0xE0 | (cp >> 12)), o += static_cast<char>(0x80 | ((cp >> 6) & 63)),
          o += static_cast<char>(0x80 | (cp & 63));
    else
      o += static_cast<char>(0xF0 | (cp >> 18)), o += static_cast<char>(0x80 | ((cp >> 12) & 63)),
          o += static_cast<char>(0x80 | ((cp >> 6) & 63)), o += static_cast<char>(0x80 | (cp & 63));
  };
  while ((i = s.find('"', i)) != std::string::npos) {
    std::string cur;
    for (i++; s[i] != '"'; i++) {
      if (s[i] != '\\') {
        cur += s[i];
        continue;
      }
      const char e = s[++i];
      if (e == 'n') cur += '\n';
      else if (e == 't') cur += '\t';
      else if (e == 'r') cur += '\r';
      else if (e == 'b') cur += '\b';
      else if (e == 'f') cur += '\f';
      else if (e == 'u') {
        unsigned cp = std::stoul(s.substr(i + 1, 4), nullptr, 16);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && s[i + 1] == '\\' && s[i + 2] == 'u') {
          const unsigned lo = std::stoul(s.substr(i + 3, 4), nullptr, 16);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          i += 6;
        }
        utf8(cur, cp);
      } else cur += e;
    }
    out.push_back(cur);
    i++;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tokenize_oracle VOCAB.gguf PRE < texts.json\n");
    return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model_kv_override ov[2] = {};
  std::strncpy(ov[0].key, "tokenizer.ggml.pre", sizeof ov[0].key - 1);
  ov[0].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
  std::strncpy(ov[0].val_str, argv[2], sizeof ov[0].val_str - 1);
  mp.kv_overrides = ov;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::printf("[");
  bool first = true;
  for (const std::string& text : read_strings(in)) {
    std::vector<llama_token> ids(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                                 static_cast<int32_t>(ids.size()), false, false);
    if (n < 0) return 1;
    std::printf("%s[", first ? "" : ",\n");
    for (int k = 0; k < n; k++) std::printf("%s%d", k ? "," : "", ids[k]);
    std::printf("]");
    first = false;
  }
  std::printf("]\n");
  llama_model_free(model);
  return 0;
}
