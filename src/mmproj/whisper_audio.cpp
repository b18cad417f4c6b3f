// Whisper's audio encoder and the projectors that feed its rows to a text model (`clip.projector_type`):
//   ultravox (Ultravox v0.5: Llama 3.x), voxtral (Voxtral Mini/Small: llama), qwen2a (Qwen2-Audio: qwen2).
// The front end (llama.cpp's mtmd-audio.cpp, from whisper.cpp): 16 kHz mono, reflection-padded by 200 samples in
// front and 30 s of zeros plus 200 behind, a periodic Hann window of 400, an FFT of 400 (theirs: radix 2 down to
// an odd length, then a DFT, from a float sin/cos table), the power spectrum through a Slaney mel filterbank
// (area-normalised, built at run time), log10 of at least 5.96e-8, clamped to max - 8, (x + 4) / 4; the frames
// cut into 30-second windows of 3000 (the last, partial one dropped: it is the padding's).
// Each window: conv1d(k3, s1, p1) + b, GELU (erf), conv1d(k3, s2, p1) + b, GELU: 1500 rows, + the learned
// positions; pre-LayerNorm blocks (vit.h; k without bias, GELU erf); qwen2a and voxtral average pairs of rows;
// the post-LayerNorm; ultravox and voxtral stack `stack_factor` rows into one (with ggml's GGML_PAD, a bit mask:
// for widths that are not powers of two it can drop the last rows instead of padding, and llama.cpp's count of
// rows is another formula; a file whose two disagree fails in llama.cpp and here alike); then the projector:
//   ultravox: RMSNorm(1e-6) x norm_pre, mlp.1, SwiGLU with the SiLU on the second half, RMSNorm x norm_mid, mlp.2
//   voxtral:  mlp.1, GELU (erf), mlp.2
//   qwen2a:   fc + b
// In the prompt: qwen2a `<|audio_bos|>` rows `<|audio_eos|>`; voxtral `[BEGIN_AUDIO]` rows; ultravox the rows.
// Causal, ordinary positions. llama.cpp: tools/mtmd/models/whisper-enc.cpp, clip.cpp, mtmd.cpp, mtmd-audio.cpp;
// ../shared/specs/multimodal-lora-router.md A.1.10.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "formats/block_formats.h"
#include "gguf/gguf_writer.h"
#include "mmproj/log_mel.h"
#include "mmproj/mmproj.h"
#include "mmproj/vit.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"
#include "ops/gelu_erf.h"

namespace kestrel {
namespace whisper_audio {
namespace {

constexpr int kRate = 16000, kFft = 400, kHop = 160, kWindowFrames = 3000, kPositions = kWindowFrames / 2;
constexpr double kPi = 3.14159265358979323846;

enum class Kind { Ultravox, Voxtral, Qwen2A };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Ultravox: return "ultravox";
    case Kind::Voxtral: return "voxtral";
    case Kind::Qwen2A: return "qwen2a";
  }
  return "?";
}

bool stacks(Kind k) { return k != Kind::Qwen2A; }
bool pools(Kind k) { return k != Kind::Ultravox; }

// ggml's GGML_PAD: a bit mask, right only for powers of two.
int64_t ggml_pad(int64_t x, int64_t n) { return (x + n - 1) & ~(n - 1); }

// ---- The log-mel front end, operand for operand as mtmd-audio.cpp computes it (float where theirs is float,
// double where theirs is double; this library is built without FMA contraction, as libmtmd is).

struct MelFrontEnd {
  int n_mel = 0;
  MelFft fft{kFft};
  std::vector<float> hann, filters;  // filters: n_mel x (kFft / 2 + 1)

  explicit MelFrontEnd(int mel) : n_mel(mel) {
    hann.resize(kFft);
    for (int i = 0; i < kFft; i++)  // fill_hann_window(400, periodic)
      hann[static_cast<size_t>(i)] =
          static_cast<float>(0.5 * (1.0 - std::cos(static_cast<float>((2.0 * kPi * i) / kFft))));
    filters = mel_filterbank(n_mel, kFft, kRate, /*htk=*/false, /*slaney_area_norm=*/true);
  }

  // The padded signal's frame count (log_mel_spectrogram's n_len).
  static int64_t frames(int64_t n_samples) {
    const int64_t n = std::max<int64_t>(n_samples, kFft / 2 + 1) + int64_t{kRate} * 30 + kFft;
    return (n - kFft) / kHop + 1;
  }
  // Full 30-second windows of the signal (the trailing partial one is padding).
  static int64_t windows(int64_t n_samples) { return frames(n_samples) / kWindowFrames; }

  // The windows' mel spectrograms, each n_mel x 3000 (a mel bin's frames contiguous).
  std::vector<std::vector<float>> windows_of(const std::vector<float>& signal) const {
    std::vector<float> s = signal;
    if (s.size() < static_cast<size_t>(kFft / 2 + 1)) s.resize(kFft / 2 + 1, 0.0f);
    const int64_t n_in = static_cast<int64_t>(s.size()), pad = kFft / 2;
    std::vector<float> p(static_cast<size_t>(n_in + int64_t{kRate} * 30 + 2 * pad), 0.0f);
    std::copy(s.begin(), s.end(), p.begin() + pad);
    std::reverse_copy(s.begin() + 1, s.begin() + 1 + pad, p.begin());
    const int64_t n = static_cast<int64_t>(p.size()), n_len = (n - kFft) / kHop + 1;
    const int bins = kFft / 2 + 1;
    std::vector<float> mel(static_cast<size_t>(n_mel * n_len));
    std::vector<float> fin(kFft * 2, 0.0f), fout(kFft * 8);
    const int64_t computed = std::min(n / kHop + 1, n_len);
    for (int64_t i = 0; i < computed; i++) {
      const int64_t off = i * kHop;
      const int valid = static_cast<int>(std::min<int64_t>(kFft, std::max<int64_t>(0, n - off)));
      for (int j = 0; j < valid; j++) fin[static_cast<size_t>(j)] = hann[static_cast<size_t>(j)] * p[static_cast<size_t>(off + j)];
      if (valid < kFft) std::fill(fin.begin() + valid, fin.end(), 0.0f);
      fft.fft(fin.data(), kFft, fout.data());
      for (int j = 0; j < bins; j++)
        fout[static_cast<size_t>(j)] = fout[2 * static_cast<size_t>(j)] * fout[2 * static_cast<size_t>(j)] +
                                       fout[2 * static_cast<size_t>(j) + 1] * fout[2 * static_cast<size_t>(j) + 1];
      for (int m = 0; m < n_mel; m++) {
        double sum = mel_bin_sum(fout.data(), filters.data() + static_cast<size_t>(m) * bins, bins);
        sum = std::max(sum, static_cast<double>(5.960464477539063e-08f));
        mel[static_cast<size_t>(m * n_len + i)] = static_cast<float>(std::log10(sum));
      }
    }
    for (int64_t i = computed; i < n_len; i++)
      for (int m = 0; m < n_mel; m++) mel[static_cast<size_t>(m * n_len + i)] = static_cast<float>(std::log10(1e-10));
    double mmax = -1e20;
    for (float v : mel) mmax = std::max(mmax, static_cast<double>(v));
    mmax -= 8.0;
    for (float& v : mel) {
      if (v < mmax) v = static_cast<float>(mmax);
      v = static_cast<float>((v + 4.0) / 4.0);
    }
    std::vector<std::vector<float>> out;
    for (int64_t off = 0; off + kWindowFrames <= n_len; off += kWindowFrames) {
      std::vector<float> w(static_cast<size_t>(n_mel) * kWindowFrames);
      for (int m = 0; m < n_mel; m++)
        std::copy_n(mel.begin() + m * n_len + off, kWindowFrames, w.begin() + static_cast<int64_t>(m) * kWindowFrames);
      out.push_back(std::move(w));
    }
    return out;
  }
};

// A conv1d kernel {3, in, out} as the product takes it, rounded to F16 as ggml's F16 im2col makes it: each output
// channel's row (c, k) with k fastest (the input's order), or with tap_major (k, c) with c fastest (three strided
// copies of rows make that im2col on the backend).
Weight conv1d_kernel(const Weight& w, int64_t in, int64_t out, bool tap_major) {
  std::vector<float> v(static_cast<size_t>(3 * in * out)), t(v.size());
  dequantize_row(w.type, w.data, v.data(), 3 * in * out);
  for (int64_t o = 0; o < out; o++)
    for (int64_t c = 0; c < in; c++)
      for (int64_t k = 0; k < 3; k++)
        t[static_cast<size_t>(o * 3 * in + (tap_major ? k * in + c : c * 3 + k))] = v[static_cast<size_t>(o * 3 * in + c * 3 + k)];
  auto bytes = std::make_shared<std::vector<uint8_t>>(row_bytes(GgmlType::F16, 3 * in) * static_cast<size_t>(out));
  quantize_row(GgmlType::F16, t.data(), bytes->data(), 3 * in * out);
  Weight k{w.name, GgmlType::F16, {3 * in, out}, bytes->data(), bytes->size(), nullptr, nullptr};
  k.owner = bytes;
  return k;
}

struct Shape {
  Kind kind;
  VitConfig cfg;
  int n_mel = 0, stack = 1;
};

class WhisperAudio final : public AudioEncoder {
 public:
  WhisperAudio(MmprojSource& src, const Shape& s)
      : be_(src.be), s_(s), front_(s.n_mel), tower_(src, "a", s.cfg) {
    const WeightLoader& ld = src.tensors;
    const int64_t d = s.cfg.width;
    auto matrix = [&](const std::string& name, int64_t in, int64_t out) {
      Weight w = ld.require(name, {in, out});
      bytes_ += static_cast<int64_t>(w.nbytes);
      return be_.prepare_weight(std::move(w));
    };
    auto floats = [&](const std::string& name, std::vector<int64_t> ne) {
      std::vector<float> v = ld.optional_floats(name, ne);
      if (v.empty()) throw Error(fmt::format("{}: missing tensor '{}'", src.file.path(), name));
      return v;
    };
    const Weight c1 = ld.require("a.conv1d.1.weight", {3, s.n_mel, d});
    const Weight c2 = ld.require("a.conv1d.2.weight", {3, d, d});
    bytes_ += static_cast<int64_t>(c1.nbytes + c2.nbytes);
    conv1_ = be_.prepare_weight(conv1d_kernel(c1, s.n_mel, d, false));
    conv2_ = be_.prepare_weight(conv1d_kernel(c2, d, d, true));
    conv1_b_ = floats("a.conv1d.1.bias", {1, d});
    conv2_b_ = floats("a.conv1d.2.bias", {1, d});
    const GgufTensorInfo* pos = src.file.find_tensor("a.position_embd.weight");
    if (!pos || pos->ne.size() != 2 || pos->ne[1] < kPositions)
      throw Error(fmt::format("{}: tensor 'a.position_embd.weight' must hold {} positions of {}", src.file.path(),
                              kPositions, d));
    pos_ = floats("a.position_embd.weight", {d, pos->ne[1]});
    pos_.resize(static_cast<size_t>(kPositions * d));
    post_w_ = ld.require_vector("a.post_ln.weight", d);
    post_b_ = ld.require_vector("a.post_ln.bias", d);
    const int64_t in = d * s.stack;  // a stacked row
    auto out_width = [&](const std::string& name) {
      const GgufTensorInfo* t = src.file.find_tensor(name);
      if (!t || t->ne.size() != 2) throw Error(fmt::format("{}: missing tensor '{}'", src.file.path(), name));
      return t->ne[1];
    };
    switch (s.kind) {
      case Kind::Ultravox: {
        const int64_t h2 = out_width("mm.a.mlp.1.weight");
        if (h2 % 2 != 0) throw Error(fmt::format("{}: 'mm.a.mlp.1.weight' has an odd width {}", src.file.path(), h2));
        hidden_ = h2 / 2;
        text_width_ = out_width("mm.a.mlp.2.weight");
        norm_pre_ = ld.require_vector("mm.a.norm_pre.weight", in);
        mlp1_ = matrix("mm.a.mlp.1.weight", in, h2);
        norm_mid_ = ld.require_vector("mm.a.norm_mid.weight", hidden_);
        mlp2_ = matrix("mm.a.mlp.2.weight", hidden_, text_width_);
        break;
      }
      case Kind::Voxtral:
        hidden_ = out_width("mm.a.mlp.1.weight");
        text_width_ = out_width("mm.a.mlp.2.weight");
        mlp1_ = matrix("mm.a.mlp.1.weight", in, hidden_);
        mlp2_ = matrix("mm.a.mlp.2.weight", hidden_, text_width_);
        break;
      case Kind::Qwen2A:
        text_width_ = out_width("mm.a.fc.weight");
        mlp1_ = matrix("mm.a.fc.weight", d, text_width_);
        fc_b_ = ld.require_vector("mm.a.fc.bias", text_width_);
        break;
    }
    bytes_ += tower_.weight_bytes();
    rows_ = window_rows();
  }

  int64_t text_width() const override { return text_width_; }
  int64_t weight_bytes() const override { return bytes_; }
  int sample_rate() const override { return kRate; }

  std::string describe() const override {
    return fmt::format("{} (Whisper): {} layers, {} wide, {} heads, FFN {}, {} mel bins, {} tokens of {} per 30 s",
                       kind_name(s_.kind), s_.cfg.n_layer, s_.cfg.width, s_.cfg.n_head, s_.cfg.n_ff, s_.n_mel, rows_,
                       text_width_);
  }

  MediaPlacement placement() const override {
    switch (s_.kind) {
      case Kind::Qwen2A: return {"<|audio_bos|>", "<|audio_eos|>", false};
      case Kind::Voxtral: return {"[BEGIN_AUDIO]", "", false};
      case Kind::Ultravox: break;
    }
    return {"", "", false};
  }

  int64_t n_tokens(int64_t n_samples) const override { return MelFrontEnd::windows(n_samples) * rows_; }

  MediaEmbeddings encode(const std::vector<float>& samples) override {
    const std::vector<std::vector<float>> windows = front_.windows_of(samples);
    MediaEmbeddings all;
    all.width = text_width_;
    for (const std::vector<float>& mel : windows) {
      MediaEmbeddings e = encode_window(mel);
      all.rows.insert(all.rows.end(), e.rows.begin(), e.rows.end());
      all.n_tokens += e.n_tokens;
    }
    return all;
  }

  // The rows of one window (llama.cpp's clip_n_output_tokens): 3000 frames, halved by the strided convolution,
  // stacked (CLIP_ALIGN: a true ceiling), halved again by the pooling.
  int64_t window_rows() const {
    int64_t n = kWindowFrames;
    if (stacks(s_.kind)) n = (n + s_.stack - 1) / s_.stack;
    n /= 2;
    if (pools(s_.kind)) n /= 2;
    return n;
  }

 private:
  MediaEmbeddings encode_window(const std::vector<float>& mel) {
    const int64_t d = s_.cfg.width, nm = s_.n_mel, T = kWindowFrames, P = kPositions;
    ensure();
    // conv1: the frames' (mel, tap) columns, padded by one frame each side.
    std::vector<float> cols(static_cast<size_t>(T * nm * 3));
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < nm; c++)
        for (int64_t k = 0; k < 3; k++) {
          const int64_t at = t + k - 1;
          cols[static_cast<size_t>((t * nm + c) * 3 + k)] = at < 0 || at >= T ? 0.0f : mel[static_cast<size_t>(c * T + at)];
        }
    be_.copy(cols_, nm * 3, be_.host_view(cols.data()), nm * 3, T, nm * 3);
    be_.matmul(conv1_, cols_, T, h_);
    be_.add_bias(h_, conv1_b_.data(), T, d);
    ops::gelu_erf(be_, {h_, T * d});
    // conv2, stride 2: output j takes frames 2j-1, 2j, 2j+1: three strided copies of rows (tap-major columns).
    be_.fill(cols2_, P * 3 * d, 0.0f);
    be_.copy(cols2_ + 3 * d + 0 * d, 3 * d, h_ + d, 2 * d, P - 1, d);  // tap 0 of j >= 1: frame 2j - 1
    be_.copy(cols2_ + 1 * d, 3 * d, h_, 2 * d, P, d);                  // tap 1: frame 2j
    be_.copy(cols2_ + 2 * d, 3 * d, h_ + d, 2 * d, P, d);              // tap 2: frame 2j + 1
    be_.matmul(conv2_, cols2_, P, x_);
    be_.add_bias(x_, conv2_b_.data(), P, d);
    ops::gelu_erf(be_, {x_, P * d});
    be_.copy(y_, d, be_.host_view(pos_.data()), d, P, d);
    be_.add(x_, y_, P * d);
    tower_.run(be_, x_, P);
    int64_t n = P;
    if (pools(s_.kind)) {  // ggml_pool_1d(avg, 2, 2): (even + odd) / 2
      n = P / 2;
      be_.copy(y_, d, x_, 2 * d, n, d);
      be_.copy(x_, d, x_ + d, 2 * d, n, d);
      be_.add(x_, y_, n * d);
      be_.scale(x_, n * d, 0.5f);
    }
    be_.layernorm(x_, post_w_.data(), post_b_.data(), x_, n, d, s_.cfg.eps);
    int64_t m = n, in = d;
    if (stacks(s_.kind)) {  // build_stack: the rows read as rows of stack x d, padded (or cut) by GGML_PAD
      in = d * s_.stack;
      const int64_t total = n * d, padded = ggml_pad(total, in);
      if (padded > total) be_.fill(x_ + total, padded - total, 0.0f);
      m = padded / in;
    }
    if (m != rows_)
      throw Error(fmt::format("{} audio: the encoder's {} rows stacked by {} give {} rows, not the {} llama.cpp counts "
                              "(ggml's GGML_PAD is a bit mask; llama.cpp refuses this width too)",
                              kind_name(s_.kind), n, s_.stack, m, rows_));
    switch (s_.kind) {
      case Kind::Ultravox: {
        be_.rmsnorm(x_, norm_pre_.data(), y_, m, in, 1e-6f);
        be_.matmul(mlp1_, y_, m, a_);
        const int64_t h = hidden_;
        be_.copy(g_, h, a_ + h, 2 * h, m, h);  // SiLU on the second half
        be_.copy(u_, h, a_, 2 * h, m, h);
        be_.silu_mul(g_, u_, m * h);
        be_.rmsnorm(g_, norm_mid_.data(), u_, m, h, 1e-6f);
        be_.matmul(mlp2_, u_, m, out_);
        break;
      }
      case Kind::Voxtral:
        be_.matmul(mlp1_, x_, m, a_);
        ops::gelu_erf(be_, {a_, m * hidden_});
        be_.matmul(mlp2_, a_, m, out_);
        break;
      case Kind::Qwen2A:
        be_.matmul(mlp1_, x_, m, out_);
        be_.add_bias(out_, fc_b_.data(), m, text_width_);
        break;
    }
    return read_embeddings(be_, out_, m, text_width_);
  }

  void ensure() {
    if (ready_) return;
    const int64_t d = s_.cfg.width, T = kWindowFrames, P = kPositions, h = std::max<int64_t>(hidden_, 1);
    cols_ = ActBuffer(be_, T * s_.n_mel * 3);
    h_ = ActBuffer(be_, T * d);
    cols2_ = ActBuffer(be_, P * 3 * d);
    x_ = ActBuffer(be_, (P + s_.stack) * d);
    y_ = ActBuffer(be_, (P + s_.stack) * d);
    a_ = ActBuffer(be_, rows_ * 2 * h);
    g_ = ActBuffer(be_, rows_ * h);
    u_ = ActBuffer(be_, rows_ * h);
    out_ = ActBuffer(be_, rows_ * text_width_);
    ready_ = true;
  }

  Backend& be_;
  Shape s_;
  MelFrontEnd front_;
  VitTower tower_;
  Weight conv1_, conv2_, mlp1_, mlp2_;
  std::vector<float> conv1_b_, conv2_b_, pos_, post_w_, post_b_, norm_pre_, norm_mid_, fc_b_;
  int64_t hidden_ = 0, text_width_ = 0, bytes_ = 0, rows_ = 0;
  bool ready_ = false;
  ActBuffer cols_, h_, cols2_, x_, y_, a_, g_, u_, out_;
};

std::unique_ptr<AudioEncoder> make(MmprojSource& src, Kind kind) {
  HparamReader& h = src.keys;
  Shape s;
  s.kind = kind;
  VitConfig& c = s.cfg;
  c.width = h.need_int("audio.embedding_length");
  c.n_head = h.need_int("audio.attention.head_count");
  if (c.n_head <= 0 || c.width % c.n_head != 0)
    throw h.bad("audio.attention.head_count", fmt::format("must divide the width {}", c.width));
  c.head_dim = c.width / c.n_head;
  if (h.int_or("audio.attention.head_dim", c.head_dim) != c.head_dim)
    throw h.bad("audio.attention.head_dim", "must be the width over the head count in a Whisper encoder");
  if (h.int_or("audio.attention.head_count_kv", c.n_head) != c.n_head)
    throw h.bad("audio.attention.head_count_kv", "must equal the head count in a Whisper encoder");
  c.n_ff = h.need_int("audio.feed_forward_length");
  c.n_layer = static_cast<int>(h.need_int("audio.block_count"));
  c.eps = static_cast<float>(h.opt_float("audio.attention.layer_norm_epsilon").value_or(-1.0));
  if (c.eps <= 0) throw h.bad("audio.attention.layer_norm_epsilon", "must be given and positive");
  c.act = VitConfig::Act::GeluErf;  // clip.cpp sets ffn_op = FFN_GELU_ERF for these projectors, whatever use_gelu says
  (void)h.opt_bool("use_gelu");
  c.k_bias = false;
  s.n_mel = static_cast<int>(h.need_int("audio.num_mel_bins"));
  if (s.n_mel <= 0 || s.n_mel > 512) throw h.bad("audio.num_mel_bins", "must be 1 to 512");
  if (stacks(kind)) {
    s.stack = static_cast<int>(h.need_int("audio.projector.stack_factor"));
    if (s.stack < 1 || s.stack > 64) throw h.bad("audio.projector.stack_factor", "must be 1 to 64");
  } else if (h.int_or("audio.projector.stack_factor", 1) != 1) {
    throw h.bad("audio.projector.stack_factor", "is not used by a qwen2a projector");
  }
  return std::make_unique<WhisperAudio>(src, s);
}

std::unique_ptr<AudioEncoder> make_ultravox(MmprojSource& src) { return make(src, Kind::Ultravox); }
std::unique_ptr<AudioEncoder> make_voxtral(MmprojSource& src) { return make(src, Kind::Voxtral); }
std::unique_ptr<AudioEncoder> make_qwen2a(MmprojSource& src) { return make(src, Kind::Qwen2A); }

MmprojSynthShape shape_of(Kind kind, int64_t text_width, const std::string& preset) {
  MmprojSynthShape s;
  s.text_width = text_width;
  s.stack = kind == Kind::Ultravox ? 8 : kind == Kind::Voxtral ? 4 : 1;
  if (preset == "tiny") {  // 80 wide: a width whose GGML_PAD stacking gives llama.cpp's count (64 would not)
    s.width = 80, s.layers = 2, s.heads = 4, s.ffn = 160, s.n_mel = 128;
    s.hidden = 64;
  } else if (preset == "whisper-large") {  // Whisper large-v3's encoder (Ultravox v0.5, Voxtral Mini)
    s.width = 1280, s.layers = 32, s.heads = 20, s.ffn = 5120, s.n_mel = 128;
    s.hidden = kind == Kind::Ultravox ? 4096 : 5120;
  } else {
    throw Error(fmt::format("{} mmproj preset '{}': tiny or whisper-large", kind_name(kind), preset));
  }
  return s;
}

void synth_of(Kind kind, GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add) {
  w.set_str("clip.projector_type", kind_name(kind));
  if (stacks(kind)) w.set_u32("clip.audio.projector.stack_factor", static_cast<uint32_t>(s.stack));
  const int64_t d = s.width, in = d * s.stack, hid = s.hidden;
  const float sd = 1.0f / std::sqrt(static_cast<float>(d));
  add("a.conv1d.1.weight", {3, s.n_mel, d}, 1.0f / std::sqrt(3.0f * s.n_mel), 0);
  add("a.conv1d.1.bias", {1, d}, 0.02f, 0);
  add("a.conv1d.2.weight", {3, d, d}, 1.0f / std::sqrt(3.0f * d), 0);
  add("a.conv1d.2.bias", {1, d}, 0.02f, 0);
  add("a.position_embd.weight", {d, kPositions}, 0.5f, 0);
  synth_vit_blocks(add, s, /*fused_qkv=*/false, "a", /*k_bias=*/false);
  const float sin = 1.0f / std::sqrt(static_cast<float>(in)), sh = 1.0f / std::sqrt(static_cast<float>(hid));
  switch (kind) {
    case Kind::Ultravox:
      add("mm.a.norm_pre.weight", {in}, 0.1f, 1.0f);
      add("mm.a.mlp.1.weight", {in, 2 * hid}, sin, 0);
      add("mm.a.norm_mid.weight", {hid}, 0.1f, 1.0f);
      add("mm.a.mlp.2.weight", {hid, s.text_width}, sh, 0);
      break;
    case Kind::Voxtral:
      add("mm.a.mlp.1.weight", {in, hid}, sin, 0);
      add("mm.a.mlp.2.weight", {hid, s.text_width}, sh, 0);
      break;
    case Kind::Qwen2A:
      add("mm.a.fc.weight", {d, s.text_width}, sd, 0);
      add("mm.a.fc.bias", {s.text_width}, 0.02f, 0);
      break;
  }
}

MmprojSynthShape ultravox_shape(int64_t t, const std::string& p) { return shape_of(Kind::Ultravox, t, p); }
MmprojSynthShape voxtral_shape(int64_t t, const std::string& p) { return shape_of(Kind::Voxtral, t, p); }
MmprojSynthShape qwen2a_shape(int64_t t, const std::string& p) { return shape_of(Kind::Qwen2A, t, p); }
void ultravox_synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& a) { synth_of(Kind::Ultravox, w, s, a); }
void voxtral_synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& a) { synth_of(Kind::Voxtral, w, s, a); }
void qwen2a_synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& a) { synth_of(Kind::Qwen2A, w, s, a); }

}  // namespace
}  // namespace whisper_audio

const Projector& ultravox_projector() {
  static const Projector p{"ultravox",   "Ultravox v0.5 (Whisper encoder; Llama 3.x)", {"llama"}, nullptr,
                           whisper_audio::ultravox_shape, whisper_audio::ultravox_synth, whisper_audio::make_ultravox};
  return p;
}

const Projector& voxtral_projector() {
  static const Projector p{"voxtral",   "Voxtral Mini/Small (Whisper encoder; llama)", {"llama"}, nullptr,
                           whisper_audio::voxtral_shape, whisper_audio::voxtral_synth, whisper_audio::make_voxtral};
  return p;
}

const Projector& qwen2a_projector() {
  static const Projector p{"qwen2a",   "Qwen2-Audio (Whisper encoder; qwen2)", {"qwen2"}, nullptr,
                           whisper_audio::qwen2a_shape, whisper_audio::qwen2a_synth, whisper_audio::make_qwen2a};
  return p;
}

}  // namespace kestrel
