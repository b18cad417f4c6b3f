#pragma once
// A multimodal projector file (llama.cpp's mmproj: a GGUF of `general.architecture = clip` holding a vision
// encoder, an audio encoder or both, and the projector that turns their output into rows of the text model's
// input width). Loaded strictly, as a text model is: a `clip.*` key or a tensor the projector does not consume
// is a load error naming it, and the projector's output width must be the text model's input width (llama.cpp's
// mtmd.cpp check). Each projector type (`clip.projector_type`) is its own file under mmproj/ (gemma3_vision.cpp:
// Gemma 3's SigLIP tower), listed in projectors(); the towers run on the backend's operators like a text model.
// A reading of llama.cpp's multimodal path: ../shared/specs/multimodal-lora-router.md, section A.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "media/image.h"

namespace kestrel {

class HparamReader;
class WeightLoader;
class GgufWriter;

// An encoder's output for one image: n_tokens rows of `width` floats, the text model's input rows.
struct MediaEmbeddings {
  int64_t n_tokens = 0, width = 0;
  std::vector<float> rows;
  // > 0: the rows are a grid_w x grid_h grid in raster order that takes M-RoPE positions in the text model
  // (runtime/request.h's MediaSpan; Qwen3.5's merged patches).
  int64_t grid_w = 0, grid_h = 0;
};

// How a projector's rows enter the text model's prompt (llama.cpp's mtmd add_media): the text tokenized
// before and after them (Gemma 3: `<start_of_image>`, `<end_of_image>`; parsed with special tokens), and
// whether the rows attend to each other both ways (Gemma 3: llama.cpp's non-causal decode of the image).
struct MediaPlacement {
  std::string before, after;
  bool non_causal = false;
};

// --image-min-tokens / --image-max-tokens (llama.cpp's): bounds on the rows of an image whose size the projector
// chooses from the image's own (Qwen3.5's); 0: the projector's default.
struct ImageTokenLimits {
  int64_t min = 0, max = 0;
  bool set() const { return min > 0 || max > 0; }
};

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // Applies limits that are set(); a projector whose images have a fixed size refuses them (Error).
  virtual void set_token_limits(const ImageTokenLimits& limits);
  // "gemma3 (SigLIP): 27 layers, 1152 wide, 16 heads, 896 px, patch 14, 256 tokens of 2560"
  virtual std::string describe() const = 0;
  virtual MediaPlacement placement() const = 0;
  // Rows an image of this size becomes.
  virtual int64_t n_tokens(int width, int height) const = 0;
  // The image as the tower takes it (llama.cpp's preprocessor: resized, letterboxed, normalised): planar RGB
  // floats, 3 * out_w * out_h.
  virtual std::vector<float> preprocess(const ImageU8& img, int& out_w, int& out_h) const = 0;
  // The image's rows for the text model.
  virtual MediaEmbeddings encode(const ImageU8& img) = 0;
  // Weight bytes of the tower and projector.
  virtual int64_t weight_bytes() const = 0;
  // The width of its rows (the projection's output).
  virtual int64_t text_width() const = 0;
};

// An audio encoder (Whisper's and its projectors: mmproj/whisper_audio.cpp): mono float32 samples at its rate
// (media/audio.h decodes files to them) into rows of the text model's input.
class AudioEncoder {
 public:
  virtual ~AudioEncoder() = default;
  // "ultravox (Whisper): 32 layers, 1280 wide, 20 heads, 128 mel bins, 187 tokens of 2048 per 30 s"
  virtual std::string describe() const = 0;
  virtual MediaPlacement placement() const = 0;
  virtual int sample_rate() const = 0;
  // Rows a signal of n samples becomes.
  virtual int64_t n_tokens(int64_t n_samples) const = 0;
  // The signal's rows for the text model (its 30-second windows' rows, one after another).
  virtual MediaEmbeddings encode(const std::vector<float>& samples) = 0;
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t text_width() const = 0;
};

// The keys and tensors of an mmproj file, checked as they are read (the projector files use these).
struct MmprojSource {
  const GgufFile& file;
  HparamReader& keys;    // `clip.*`
  WeightLoader& tensors;
  Backend& be;
};

// What a projector type writes into a synthetic mmproj (synth --mmproj): its keys and tensors.
struct MmprojSynthShape {
  int64_t text_width = 0;  // the text model's input width (projection_dim)
  int64_t width = 0, layers = 0, heads = 0, ffn = 0;
  int64_t image_size = 0, patch_size = 0, merge = 0;
  int64_t n_mel = 0, stack = 0, hidden = 0;  // audio: mel bins, frames stacked into a row, the projector's width
  int64_t conv_channels[2] = {0, 0};          // audio (gemma4a): the subsampling convolutions' channels
};

// Writes a random tensor into a synthetic mmproj: add(name, ne, stddev, constant).
using SynthAdd = std::function<void(const std::string&, std::vector<int64_t>, float, float)>;

// One projector type Kestrel runs (`clip.projector_type`), in its own file under mmproj/.
struct Projector {
  const char* name;       // clip.projector_type
  const char* models;     // the released models whose mmproj files it covers
  // The text architectures whose input it feeds: their positions and attention for media rows are implemented there.
  std::vector<std::string> text_archs;
  bool feeds(const std::string& arch) const;
  std::unique_ptr<VisionEncoder> (*make_vision)(MmprojSource& src);  // null for an audio projector
  // Its synth shape for a text model of this width ("tiny": a small image and tower).
  MmprojSynthShape (*synth_shape)(int64_t text_width, const std::string& preset);
  // Its keys and tensors into w; add(name, ne, stddev, constant) writes a random tensor.
  void (*synth)(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add);
  std::unique_ptr<AudioEncoder> (*make_audio)(MmprojSource& src) = nullptr;  // null for a vision projector
};
const std::vector<const Projector*>& projectors();
const Projector& projector_of(const std::string& name);

class Mmproj {
 public:
  // Loads path for a text model of this architecture whose input rows are text_width floats. Errors name the
  // file and the key or tensor, or the text model the projector does not pair with. An audio encoder Kestrel does
  // not run is refused by name in a file without vision, and set aside beside a vision encoder (Gemma 4's).
  static std::unique_ptr<Mmproj> load(const std::string& path, Backend& be, const std::string& text_arch,
                                      int64_t text_width);
  ~Mmproj();

  const std::string& path() const { return file_.path(); }
  // The vision projector's type, else the audio one's.
  const std::string& projector() const { return projector_.empty() ? audio_projector_ : projector_; }
  VisionEncoder* vision() const { return vision_.get(); }  // null in an audio-only file
  AudioEncoder* audio() const { return audio_.get(); }     // null without an audio encoder Kestrel runs
  // The audio encoder's projector type when the file also has one Kestrel does not run (audio input is refused),
  // else "".
  const std::string& audio_not_run() const { return audio_ ? kNone : audio_projector_; }
  int64_t file_bytes() const { return bytes_; }

 private:
  explicit Mmproj(GgufFile f) : file_(std::move(f)) {}
  GgufFile file_;
  std::string projector_, audio_projector_;
  int64_t bytes_ = 0;
  std::unique_ptr<VisionEncoder> vision_;
  std::unique_ptr<AudioEncoder> audio_;
  static inline const std::string kNone;
};

// `kestrel info` of an mmproj file without a text model: its encoders, projector, sizes, key shapes.
std::string describe_mmproj(const std::string& path);

// A random-weight mmproj of `projector` for a text model text_width wide (synth --mmproj).
// Matrices in `type` (F32, F16 or Q8_0; the converters write F16), vectors and the position embedding F32;
// layers > 0 overrides the preset's block count.
void synth_mmproj(const std::string& path, const std::string& projector, int64_t text_width, uint64_t seed,
                  const std::string& preset = "tiny", GgmlType type = GgmlType::F32, int64_t layers = 0);

}  // namespace kestrel
