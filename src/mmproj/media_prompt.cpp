#include "mmproj/media_prompt.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <chrono>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/read_file.h"
#include "media/audio.h"

namespace kestrel {

uint64_t media_hash(const void* data, size_t n) { return XXH3_64bits(data, n); }

MediaInput media_input_from_file(const std::string& path, int audio_rate) {
  const std::string bytes = read_whole_file(path, "media file");
  const std::span<const uint8_t> b(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  MediaInput in;
  in.hash = media_hash(bytes.data(), bytes.size());
  if (looks_like_audio(b)) {
    in.audio = true;
    in.samples = decode_audio(b, {}, path, audio_rate);
  } else {
    in.image = decode_image(b, {}, path);
  }
  return in;
}

MediaPrompt build_media_prompt(const Tokenizer& tok, const MediaEncoders& enc, const std::string& text,
                               const std::vector<MediaInput>& images, const MediaPromptOptions& o) {
  const std::string& marker = o.marker;
  size_t markers = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, p + marker.size())) markers++;
  if (markers != images.size())
    throw Error(fmt::format("the prompt has {} media markers for {} media inputs", markers, images.size()));
  for (const MediaInput& in : images) {
    if (in.audio && !enc.audio)
      throw Error("audio input needs an mmproj with an audio encoder Kestrel runs (this one has none)");
    if (!in.audio && !enc.vision)
      throw Error("image input needs an mmproj with a vision encoder (this one has only audio)");
  }
  // The rows of each distinct image, encoded once (where the caller runs encoders).
  struct Encoded {
    std::shared_ptr<const std::vector<float>> rows;
    int64_t grid_w, grid_h;
  };
  std::map<uint64_t, Encoded> encoded;
  double seconds = 0;
  auto encode_all = [&] {
    for (const MediaInput& in : images) {
      if (encoded.count(in.hash)) continue;
      const auto t0 = std::chrono::steady_clock::now();
      MediaEmbeddings e = in.audio ? enc.audio->encode(in.samples) : enc.vision->encode(in.image);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      encoded[in.hash] = {std::make_shared<const std::vector<float>>(std::move(e.rows)), e.grid_w, e.grid_h};
    }
  };
  if (o.run_encoder) o.run_encoder(encode_all);
  else encode_all();

  MediaPrompt out;
  out.encode_seconds = seconds;
  out.encoded = static_cast<int64_t>(encoded.size());
  auto add_ids = [&](const std::vector<int32_t>& ids) { out.tokens.insert(out.tokens.end(), ids.begin(), ids.end()); };
  auto add_text = [&](size_t offset, size_t len) {
    if (len == 0) return;
    const std::string_view piece = std::string_view(text).substr(offset, len);
    add_ids(o.tokenize_piece ? o.tokenize_piece(piece, offset) : tok.encode(piece, false, o.parse_special));
  };
  size_t start = 0, image = 0;
  for (;;) {
    const size_t p = text.find(marker, start);
    add_text(start, (p == std::string::npos ? text.size() : p) - start);
    if (p == std::string::npos) break;
    const MediaInput& in = images[image++];
    const MediaPlacement place = in.audio ? enc.audio->placement() : enc.vision->placement();
    const int64_t width = in.audio ? enc.audio->text_width() : enc.vision->text_width();
    if (!place.before.empty()) add_ids(tok.encode(place.before, false, true));
    MediaSpan span;
    span.start = static_cast<int64_t>(out.tokens.size());
    const Encoded& e = encoded.at(in.hash);
    span.rows = e.rows;
    span.grid_w = e.grid_w;
    span.grid_h = e.grid_h;
    span.width = width;
    span.n_tokens = static_cast<int64_t>(span.rows->size()) / span.width;
    span.both_ways = place.non_causal;
    out.media.push_back(span);
    out.media_tokens += span.n_tokens;
    add_ids(media_placeholders(in.hash, span.n_tokens));
    if (!place.after.empty()) add_ids(tok.encode(place.after, false, true));
    start = p + marker.size();
  }
  const Vocab& v = tok.vocab();
  if (o.add_special && v.add_bos) {
    out.tokens.insert(out.tokens.begin(), v.bos);
    for (MediaSpan& m : out.media) m.start++;
  }
  if (o.add_special && v.add_eos && v.eos >= 0) out.tokens.push_back(v.eos);
  return out;
}

}  // namespace kestrel
