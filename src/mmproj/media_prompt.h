#pragma once
// A prompt of text and images, laid out as llama.cpp's mtmd_tokenize does: the text split at each media marker
// (`<__media__>`), each piece tokenized apart (special tokens parsed), each image as its projector's text before,
// its rows (placeholders in the token list, a MediaSpan of the request), its text after; BOS first where the
// vocabulary adds one. The rows of equal images are encoded once (by content hash).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "media/audio.h"
#include "media/image.h"
#include "mmproj/mmproj.h"
#include "runtime/request.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

inline constexpr const char* kMediaMarker = "<__media__>";

// An image, or (audio set) an audio file's mono samples at the audio encoder's rate.
struct MediaInput {
  ImageU8 image;
  std::vector<float> samples;
  bool audio = false;
  uint64_t hash = 0;  // of the file's bytes (media_hash)
};

// The encoders of an mmproj file (either may be null: a file without vision, or without audio Kestrel runs).
struct MediaEncoders {
  VisionEncoder* vision = nullptr;
  AudioEncoder* audio = nullptr;
};
inline MediaEncoders encoders_of(const Mmproj& m) { return {m.vision(), m.audio()}; }

struct MediaPrompt {
  std::vector<int32_t> tokens;  // media rows hold placeholders (request.h's media_placeholders)
  std::vector<MediaSpan> media;
  double encode_seconds = 0;
  int64_t media_tokens = 0;
  int64_t encoded = 0;  // media encoded (a repeated file once)
};

// XXH3-64 of a media file's bytes.
uint64_t media_hash(const void* data, size_t n);
// An image or audio file's bytes (told apart as llama.cpp's libmtmd does: WAV, FLAC and MP3 by their magic bytes)
// decoded (default limits; audio at audio_rate Hz) and hashed; errors name the file.
MediaInput media_input_from_file(const std::string& path, int audio_rate = 16000);

struct MediaPromptOptions {
  std::string marker = kMediaMarker;
  bool add_special = true;    // BOS first (EOS last) where the vocabulary adds them
  bool parse_special = true;  // special-token text in the pieces becomes those tokens
  // Tokenizes the piece of the text that starts at byte `offset` (set: the server's, which keeps message content
  // plain); unset: tok.encode(piece, false, parse_special).
  std::function<std::vector<int32_t>(std::string_view piece, size_t offset)> tokenize_piece;
  // Runs the encoding (set: the server runs it on its engine thread, between steps); unset: here.
  std::function<void(const std::function<void()>&)> run_encoder;
};

// `text` with one marker per media input (Error when the counts differ, naming both, or when an input's encoder
// is missing: an image without a vision encoder, audio without an audio encoder).
MediaPrompt build_media_prompt(const Tokenizer& tok, const MediaEncoders& enc, const std::string& text,
                               const std::vector<MediaInput>& inputs, const MediaPromptOptions& options = {});

}  // namespace kestrel
