#include "gguf/llama2c_import.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "formats/block_formats.h"
#include "core/error.h"
#include "formats/storage_type.h"

namespace kestrel {
namespace {

struct Llama2cConfig {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

struct Llama2cTokenizer {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

// llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte.
Llama2cTokenizer read_tokenizer(const MappedFile& f, int32_t vocab_size) {
  const auto b = f.bytes();
  size_t pos = 0;
  auto need = [&](size_t n, const char* what) {
    if (b.size() - pos < n)
      throw Error(fmt::format("{}: llama2.c tokenizer ends inside {} (need {} tokens)", f.name(), what, vocab_size));
  };
  need(4, "the header");
  pos += 4;  // max_token_length, not needed
  Llama2cTokenizer t;
  for (int32_t i = 0; i < vocab_size; i++) {
    need(8, "a token entry");
    float score;
    int32_t len;
    std::memcpy(&score, b.data() + pos, 4);
    std::memcpy(&len, b.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || len > 4096) throw Error(fmt::format("{}: token {} has invalid length {}", f.name(), i, len));
    need(static_cast<size_t>(len), "a token string");
    std::string piece(reinterpret_cast<const char*>(b.data() + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    int32_t type = 1;
    if (i == 0) { piece = "<unk>"; type = 2; }
    else if (i == 1) { piece = "<s>"; type = 3; }
    else if (i == 2) { piece = "</s>"; type = 3; }
    else if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') type = 6;
    else {
      // llama2.c stores SentencePiece's U+2581 word marker as a plain space.
      std::string sp;
      for (char c : piece) sp += (c == ' ') ? std::string("\xE2\x96\x81") : std::string(1, c);
      piece = sp;
    }
    t.pieces.push_back(std::move(piece));
    t.scores.push_back(score);
    t.types.push_back(type);
  }
  return t;
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  char magic[4] = {};
  return f && std::fread(magic, 1, 4, f.get()) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

GgufWriter llama2c_to_gguf(const MappedFile& ckpt, const MappedFile& tok_file, const Llama2cOptions& opt) {
  const auto bytes = ckpt.bytes();
  if (bytes.size() < sizeof(Llama2cConfig))
    throw Error(fmt::format("{}: not a llama2.c checkpoint (only {} bytes, less than its {}-byte header)", ckpt.name(),
                            bytes.size(), sizeof(Llama2cConfig)));
  Llama2cConfig c;
  std::memcpy(&c, bytes.data(), sizeof c);
  const bool shared = c.vocab_size > 0;
  const int64_t vocab = shared ? c.vocab_size : -static_cast<int64_t>(c.vocab_size);
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || vocab <= 0 ||
      c.seq_len <= 0 || c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 || c.dim > (1 << 16) ||
      c.n_layers > 1024 || vocab > (1 << 24))
    throw Error(fmt::format("{}: not a llama2.c checkpoint (header dim={} hidden={} layers={} heads={} kv_heads={} "
                            "vocab={} seq_len={})",
                            ckpt.name(), c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len));
  const int64_t dim = c.dim, hidden = c.hidden_dim, L = c.n_layers, head = dim / c.n_heads;
  const int64_t kv_dim = dim * c.n_kv_heads / c.n_heads;

  // Offsets (in floats) of each array, in file order.
  int64_t off = 0;
  auto take = [&](int64_t n) { const int64_t o = off; off += n; return o; };
  const int64_t o_emb = take(vocab * dim), o_rms_att = take(L * dim), o_wq = take(L * dim * dim),
                o_wk = take(L * kv_dim * dim), o_wv = take(L * kv_dim * dim), o_wo = take(L * dim * dim),
                o_rms_ffn = take(L * dim), o_w1 = take(L * hidden * dim), o_w2 = take(L * dim * hidden),
                o_w3 = take(L * hidden * dim), o_rms_final = take(dim);
  take(static_cast<int64_t>(c.seq_len) * head / 2);  // freq_cis_real (legacy, unused)
  take(static_cast<int64_t>(c.seq_len) * head / 2);  // freq_cis_imag
  const int64_t o_wcls = shared ? o_emb : take(vocab * dim);
  const size_t expected = sizeof(Llama2cConfig) + static_cast<size_t>(off) * sizeof(float);
  if (bytes.size() != expected)
    throw Error(fmt::format("{}: llama2.c checkpoint should be {} bytes for its header (dim {}, {} layers, vocab {}), "
                            "but is {} bytes (truncated or not a version-0 checkpoint)",
                            ckpt.name(), expected, dim, L, vocab, bytes.size()));
  const float* w = reinterpret_cast<const float*>(bytes.data() + sizeof(Llama2cConfig));

  Llama2cTokenizer tok = read_tokenizer(tok_file, static_cast<int32_t>(vocab));

  GgufWriter g;
  g.set_str("general.architecture", "llama");
  g.set_str("general.name", opt.name);
  g.set_u32("general.file_type", llama_file_type(opt.type));
  g.set_u32("llama.context_length", static_cast<uint32_t>(c.seq_len));
  g.set_u32("llama.embedding_length", static_cast<uint32_t>(dim));
  g.set_u32("llama.feed_forward_length", static_cast<uint32_t>(hidden));
  g.set_u32("llama.block_count", static_cast<uint32_t>(L));
  g.set_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
  g.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  g.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(head));
  g.set_f32("llama.rope.freq_base", 10000.0f);
  g.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.set_u32("llama.vocab_size", static_cast<uint32_t>(vocab));
  g.set_str("tokenizer.ggml.model", "llama");
  g.set("tokenizer.ggml.tokens", GgufValue::strings(tok.pieces));
  g.set("tokenizer.ggml.scores", GgufValue::floats(tok.scores));
  g.set("tokenizer.ggml.token_type", GgufValue::int32s(tok.types));
  g.set_u32("tokenizer.ggml.unknown_token_id", 0);
  g.set_u32("tokenizer.ggml.bos_token_id", 1);
  g.set_u32("tokenizer.ggml.eos_token_id", 2);
  g.set_bool("tokenizer.ggml.add_bos_token", true);
  g.set_bool("tokenizer.ggml.add_eos_token", false);

  auto add = [&](const std::string& name, int64_t offset, std::vector<int64_t> ne) {
    const float* src = w + offset;
    const GgmlType type = storage_type_for(opt.type, ne);
    if (ne.size() > 1 && type != opt.type && opt.on_fallback) opt.on_fallback(name, type);
    const int64_t rows = ne.size() > 1 ? ne[1] : 1, cols = ne[0];
    g.add_tensor(name, type, ne, [src, type, rows, cols](uint8_t* dst, size_t) {
      const size_t rb = row_bytes(type, cols);
      for (int64_t r = 0; r < rows; r++) quantize_row(type, src + r * cols, dst + r * rb, cols);
    });
  };
  add("token_embd.weight", o_emb, {dim, vocab});
  add("output_norm.weight", o_rms_final, {dim});
  add("output.weight", o_wcls, {dim, vocab});
  for (int64_t l = 0; l < L; l++) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_norm.weight", o_rms_att + l * dim, {dim});
    add(p + "attn_q.weight", o_wq + l * dim * dim, {dim, dim});
    add(p + "attn_k.weight", o_wk + l * kv_dim * dim, {dim, kv_dim});
    add(p + "attn_v.weight", o_wv + l * kv_dim * dim, {dim, kv_dim});
    add(p + "attn_output.weight", o_wo + l * dim * dim, {dim, dim});
    add(p + "ffn_norm.weight", o_rms_ffn + l * dim, {dim});
    add(p + "ffn_gate.weight", o_w1 + l * hidden * dim, {dim, hidden});
    add(p + "ffn_down.weight", o_w2 + l * dim * hidden, {hidden, dim});
    add(p + "ffn_up.weight", o_w3 + l * hidden * dim, {dim, hidden});
  }
  return g;
}

}  // namespace kestrel
