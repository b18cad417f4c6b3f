#include "mmproj/mmproj.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/splitmix.h"
#include "formats/block_formats.h"
#include "gguf/gguf_writer.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"

namespace kestrel {

const Projector& gemma3_projector();
const Projector& qwen3vl_projector();
const Projector& gemma4v_projector();
const Projector& pixtral_projector();
const Projector& ultravox_projector();
const Projector& voxtral_projector();
const Projector& qwen2a_projector();
const Projector& gemma4a_projector();

const std::vector<const Projector*>& projectors() {
  static const std::vector<const Projector*> all = {&gemma3_projector(),   &qwen3vl_projector(), &gemma4v_projector(),
                                                    &pixtral_projector(),  &ultravox_projector(), &voxtral_projector(),
                                                    &qwen2a_projector(),   &gemma4a_projector()};
  return all;
}

bool Projector::feeds(const std::string& arch) const {
  return std::find(text_archs.begin(), text_archs.end(), arch) != text_archs.end();
}

namespace {

const Projector* find_projector(const std::string& name) {
  for (const Projector* p : projectors())
    if (name == p->name) return p;
  return nullptr;
}

// The projector type of a modality: clip.projector_type, or clip.{vision,audio}.projector_type in files that
// carry both (llama.cpp's clip.cpp order); none when the file names neither.
std::optional<std::string> projector_type(HparamReader& h, const char* modality) {
  if (auto t = h.opt_string("projector_type")) return t;
  return h.opt_string(fmt::format("{}.projector_type", modality));
}

std::string unknown_projector(const std::string& name) {
  std::string names;
  for (const Projector* p : projectors()) names += (names.empty() ? "" : ", ") + std::string(p->name);
  return fmt::format("projector type '{}' is not implemented (Kestrel runs: {})", name, names);
}

}  // namespace

const Projector& projector_of(const std::string& name) {
  if (const Projector* p = find_projector(name)) return *p;
  throw Error(unknown_projector(name));
}

namespace {

void check_clip(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  if (!arch || arch->type != GgufValueType::STRING || arch->as_string() != "clip")
    throw Error(fmt::format("{}: general.architecture is {}, not 'clip': not an mmproj file (pass the text model "
                            "with -m and its projector with --mmproj)",
                            f.path(), arch ? arch->to_display() : "missing"));
}

}  // namespace

void VisionEncoder::set_token_limits(const ImageTokenLimits& limits) {
  if (limits.set())
    throw Error(fmt::format("--image-min-tokens/--image-max-tokens: this projector's images have a fixed number of "
                            "tokens ({})",
                            describe()));
}

Mmproj::~Mmproj() = default;

std::unique_ptr<Mmproj> Mmproj::load(const std::string& path, Backend& be, const std::string& text_arch,
                                     int64_t text_width) {
  std::unique_ptr<Mmproj> m(new Mmproj(GgufFile::open(path)));
  const GgufFile& f = m->file_;
  check_clip(f);
  HparamReader h(f, "clip");
  WeightLoader ld(f);
  const bool vision = h.opt_bool("has_vision_encoder").value_or(false);
  const bool audio = h.opt_bool("has_audio_encoder").value_or(false);
  if (h.opt_bool("has_gen_audio_encoder").value_or(false))
    throw h.bad("has_gen_audio_encoder", "is set: audio generation encoders are not implemented");
  if (!vision && !audio) throw h.bad("has_vision_encoder", "is not set: the file has no encoder Kestrel runs");
  // Each encoder's projector: found, and pairing with the text model.
  // An encoder's projector (type), found and pairing with the text model.
  auto projector_for = [&](const char* modality, const std::optional<std::string>& type) -> const Projector& {
    if (!type) throw Error(fmt::format("{}: no clip.projector_type: not an mmproj file", path));
    const Projector* p = find_projector(*type);
    if (!p) throw Error(fmt::format("{}: {}", path, unknown_projector(*type)));
    if (!p->feeds(text_arch))
      throw Error(fmt::format("{}: a {} projector feeds {} text models, not {} (its {} rows need that family's "
                              "positions and attention)",
                              path, *type, fmt::join(p->text_archs, " or "), text_arch,
                              std::string(modality) == "vision" ? "image" : "audio"));
    return *p;
  };
  MmprojSource src{f, h, ld, be};
  if (audio) {
    // (A file with both names each encoder's projector; an audio-only one may name its own as clip.projector_type.)
    auto type = h.opt_string("audio.projector_type");
    if (!type) type = h.opt_string("projector_type");
    const Projector* p = type ? find_projector(*type) : nullptr;
    if (p && p->make_audio) {
      m->audio_projector_ = *type;
      m->audio_ = projector_for("audio", type).make_audio(src);
      const int64_t proj_dim = h.need_int("audio.projection_dim");
      if (proj_dim != m->audio_->text_width())
        throw h.bad("audio.projection_dim", fmt::format("is {} but the projection gives rows of {}", proj_dim,
                                                        m->audio_->text_width()));
    } else if (!vision) {
      std::string names;
      for (const Projector* q : projectors())
        if (q->make_audio) names += (names.empty() ? "" : ", ") + std::string(q->name);
      throw Error(fmt::format("{}: clip.has_audio_encoder is set, but Kestrel runs no audio encoder of projector type "
                              "'{}' (audio: {})",
                              path, type.value_or("(none)"), names));
    } else {
      // A file with both whose audio encoder Kestrel does not run (Gemma 4 E2B/E4B's gemma4a): the vision encoder
      // runs; the audio one is not loaded, and audio input is refused by name wherever it comes (serve:
      // input_audio is a 400). Its keys and tensors are set aside here, so they cannot change what images compute.
      m->audio_projector_ = type.value_or("unknown");
      for (const auto& [key, value] : f.metadata())
        if (key.rfind("clip.audio.", 0) == 0) h.accept(key.substr(5));
      ld.skip_prefix("a.", "the audio encoder (not implemented)");
      ld.skip_prefix("mm.a.", "the audio projector (not implemented)");
    }
  }
  if (vision) {
    const auto type = projector_type(h, "vision");
    const Projector& p = projector_for("vision", type);
    m->projector_ = *type;
    if (!p.make_vision)
      throw Error(fmt::format("{}: clip.has_vision_encoder is set but {} is an audio projector", path, m->projector_));
    m->vision_ = p.make_vision(src);
    const int64_t proj_dim = h.need_int("vision.projection_dim");  // the text width: the projection's rows
    if (proj_dim != m->vision_->text_width())
      throw h.bad("vision.projection_dim", fmt::format("is {} but the projection gives rows of {}", proj_dim,
                                                       m->vision_->text_width()));
  }
  h.finish();
  ld.finish("clip (" + m->projector() + ")");
  for (const auto& t : f.tensors()) m->bytes_ += static_cast<int64_t>(t.nbytes);
  // llama.cpp's mtmd.cpp check: the projector's rows must be the text model's input rows.
  const int64_t out_width = m->vision_ ? m->vision_->text_width() : m->audio_->text_width();
  if (m->vision_ && m->audio_ && m->audio_->text_width() != out_width)
    throw Error(fmt::format("{}: the vision projector's rows are {} wide but the audio projector's {}", path,
                            out_width, m->audio_->text_width()));
  if (out_width != text_width)
    throw Error(fmt::format("{}: the projector's output is {} wide but the text model's input is {} wide: this mmproj "
                            "belongs to another model",
                            path, out_width, text_width));
  return m;
}

std::string describe_mmproj(const std::string& path) {
  GgufFile f = GgufFile::open(path);
  check_clip(f);
  HparamReader h(f, "clip");
  int64_t bytes = 0;
  for (const auto& t : f.tensors()) bytes += static_cast<int64_t>(t.nbytes);
  std::string s = fmt::format("mmproj {}: {} tensors, {:.1f} MiB\n", path, f.tensors().size(), bytes / 1048576.0);
  for (const char* modality : {"vision", "audio"}) {
    if (!h.opt_bool(fmt::format("has_{}_encoder", modality)).value_or(false)) continue;
    const std::string type = projector_type(h, modality).value_or("?");
    auto num = [&](const std::string& k) { return h.opt_int(fmt::format("{}.{}", modality, k)).value_or(0); };
    s += fmt::format("  {} encoder: projector {} ({}), {} layers, width {}, {} heads, FFN {}, output width {}", modality,
                     type, find_projector(type) ? "implemented" : "not implemented",
                     num("block_count"), num("embedding_length"), num("attention.head_count"),
                     num("feed_forward_length"), num("projection_dim"));
    if (std::string(modality) == "vision")
      s += fmt::format(", image {} px, patch {}", num("image_size"), num("patch_size"));
    s += "\n";
  }
  return s;
}

void synth_mmproj(const std::string& path, const std::string& projector, int64_t text_width, uint64_t seed,
                  const std::string& preset, GgmlType type, int64_t layers) {
  // "gemma4v+gemma4a": one file with both encoders (as Gemma 4 E2B/E4B's converter writes them), each with its own
  // preset when `preset` names as many ("tiny+tiny"), else the one preset.
  auto split = [](const std::string& x) {
    std::vector<std::string> parts;
    for (size_t at = 0;;) {
      const size_t plus = x.find('+', at);
      parts.push_back(x.substr(at, plus == std::string::npos ? std::string::npos : plus - at));
      if (plus == std::string::npos) return parts;
      at = plus + 1;
    }
  };
  const std::vector<std::string> names = split(projector), presets = split(preset);
  if (presets.size() != 1 && presets.size() != names.size())
    throw Error(fmt::format("--mmproj-preset '{}': one preset, or one per projector of '{}'", preset, projector));
  std::vector<const Projector*> ps;
  std::vector<MmprojSynthShape> shapes;
  for (size_t i = 0; i < names.size(); i++) {
    ps.push_back(&projector_of(names[i]));
    shapes.push_back(ps.back()->synth_shape(text_width, presets[presets.size() == 1 ? 0 : i]));
    if (layers > 0) shapes.back().layers = layers;
  }
  if (ps.size() > 2 || (ps.size() == 2 && (!ps[0]->make_vision || !ps[1]->make_audio)))
    throw Error(fmt::format("--mmproj-projector '{}': one projector, or a vision one then an audio one", projector));
  if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::Q8_0)
    throw Error(fmt::format("--mmproj-type {}: synth writes projectors in f32, f16 or q8_0", type_name(type)));
  GgufWriter w;
  w.set_str("general.architecture", "clip");
  w.set_str("general.type", "mmproj");
  w.set_str("general.name", fmt::format("synth-mmproj-{}-{}", projector, preset));
  w.set_u32("general.file_type", type == GgmlType::F32 ? 0 : type == GgmlType::F16 ? 1 : 7);
  // (The keys in the order earlier synth files have them: their recorded sha256s stay.)
  for (size_t i = 0; i < ps.size(); i++) {
    const Projector& p = *ps[i];
    const MmprojSynthShape& s = shapes[i];
    const std::string mod = p.make_vision ? "vision" : "audio";
    w.set_bool("clip.has_" + mod + "_encoder", true);
    w.set_u32("clip." + mod + ".projection_dim", static_cast<uint32_t>(text_width));
    if (p.make_vision) {
      w.set_u32("clip.vision.image_size", static_cast<uint32_t>(s.image_size));
      w.set_u32("clip.vision.patch_size", static_cast<uint32_t>(s.patch_size));
    }
    for (const auto& [key, value] : {std::pair<const char*, int64_t>{"embedding_length", s.width},
                                     {"feed_forward_length", s.ffn}, {"block_count", s.layers},
                                     {"attention.head_count", s.heads}})
      w.set_u32(fmt::format("clip.{}.{}", mod, key), static_cast<uint32_t>(value));
    if (p.make_vision) {
      w.set("clip.vision.image_mean", GgufValue::floats({0.5f, 0.5f, 0.5f}));
      w.set("clip.vision.image_std", GgufValue::floats({0.5f, 0.5f, 0.5f}));
    } else {
      w.set_u32("clip.audio.num_mel_bins", static_cast<uint32_t>(s.n_mel));
      w.set_f32("clip.audio.attention.layer_norm_epsilon", 1e-5f);
    }
  }
  // Every tensor F32, uniform around `constant` with this standard deviation, from (seed, tensor, row).
  uint64_t id = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, float stddev, float constant) {
    const uint64_t tid = id++;
    // Matrices in the chosen type (Q8_0 only where rows are whole blocks), the rest F32.
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;  // (Whisper's are {1, d})
    const bool matrix = ne.size() >= 2 && !bias && name != "v.position_embd.weight" && name != "a.position_embd.weight";
    // (Q8_0 files keep the patch kernels and Gemma 3's input projection F16, as the converter forces it.)
    const bool f16_kept = name.rfind("v.patch_embd.weight", 0) == 0 || name == "mm.input_projection.weight" ||
                          name == "mm.patch_merger.weight" || name.rfind("a.conv1d.", 0) == 0;
    // (Gemma 4's audio converter forces its 3x3 convolution kernels and its depthwise one to F32.)
    const bool f32_kept = (name.rfind("a.conv1d.", 0) == 0 && ne.size() == 4) ||
                          name.find(".conv_dw.weight") != std::string::npos;
    const GgmlType t = !matrix || f32_kept ? GgmlType::F32
                       : type == GgmlType::Q8_0 && (f16_kept || ne[0] % 32 != 0) ? GgmlType::F16
                                                                                  : type;
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    w.add_tensor(name, t, ne, [=](uint8_t* dst, size_t) {
      std::vector<float> out(static_cast<size_t>(n));
      uint64_t state = seed * 0x100000001B3ull ^ (tid << 40) ^ 0x6d6d70726f6aull;
      const float half = stddev * std::sqrt(3.0f);
      for (auto& x : out) x = constant + static_cast<float>((2.0 * splitmix_unit(state) - 1.0) * half);
      quantize_row(t, out.data(), dst, n);
    });
  };
  for (size_t i = 0; i < ps.size(); i++) ps[i]->synth(w, shapes[i], add);
  w.write_file(path);
}

}  // namespace kestrel
