#include "serving/api/media_input.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/base64.h"
#include "media/audio.h"

namespace kestrel {

namespace {

// Base64 text of at most one file's bytes (max), decoded (its length refused before decoding).
std::string decoded(std::string_view text, const std::string& param, size_t max, const char* what = "image") {
  if (text.size() > max / 3 * 4 + 4)
    throw bad_request(param, fmt::format("'{}' holds more than {} bytes (the limit of one {})", param, max, what));
  auto bytes = base64_decode(text);
  if (!bytes) throw bad_request(param, fmt::format("'{}' is not valid base64 {} data", param, what));
  return std::move(*bytes);
}

}  // namespace

std::string image_url_bytes(const std::string& url, const std::string& param, const MediaSupport& m) {
  std::string bytes;
  if (url.rfind("data:", 0) == 0) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) throw bad_request(param, fmt::format("'{}' is a data: URI without data", param));
    const std::string head = url.substr(5, comma - 5);
    if (head.size() < 7 || head.compare(head.size() - 7, 7, ";base64") != 0)
      throw bad_request(param, fmt::format("'{}' must be a base64 data: URI (data:image/png;base64,...)", param));
    if (head.rfind("image/", 0) != 0)
      throw bad_request(param, fmt::format("'{}' is a data: URI of {}, not an image", param, head.substr(0, head.size() - 7)));
    bytes = decoded(std::string_view(url).substr(comma + 1), param, m.max_bytes);
  } else if (url.rfind("file://", 0) == 0) {
    if (m.media_path.empty())
      throw bad_request(param, fmt::format("'{}' is a file:// URL: the server reads local files only when started "
                                           "with --media-path DIR",
                                           param));
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path root = fs::weakly_canonical(m.media_path, ec);
    const fs::path file = fs::weakly_canonical(fs::path(m.media_path) / url.substr(7), ec);
    const auto rel = file.lexically_relative(root);
    if (ec || rel.empty() || *rel.begin() == "..")
      throw bad_request(param, fmt::format("'{}' names a file outside --media-path", param));
    const auto size = fs::file_size(file, ec);
    if (ec) throw bad_request(param, fmt::format("'{}': no such file under --media-path", param));
    if (size > m.max_bytes)
      throw bad_request(param, fmt::format("'{}' is {} bytes, more than the {} of one image", param, size, m.max_bytes));
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  } else if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    if (!m.fetch)
      throw bad_request(param, fmt::format("'{}' is an http(s) URL: this server does not fetch images (start it with "
                                           "--allow-media-urls to let it); send the image itself as a data: URI or "
                                           "base64",
                                           param));
    try {
      bytes = m.fetch(url);
    } catch (const std::exception& e) {
      throw bad_request(param, fmt::format("'{}': fetching {} failed: {}", param, url, e.what()));
    }
  } else {
    bytes = decoded(url, param, m.max_bytes);  // raw base64, as llama-server takes it
  }
  if (bytes.size() > m.max_bytes)
    throw bad_request(param, fmt::format("'{}' is {} bytes, more than the {} of one image", param, bytes.size(), m.max_bytes));
  if (bytes.empty()) throw bad_request(param, fmt::format("'{}' holds no image data", param));
  return bytes;
}

MediaPart image_part(const nlohmann::ordered_json& part, const std::string& param, const ApiContext& ctx) {
  if (!ctx.media || !ctx.media->vision)
    throw bad_request(param, fmt::format("'{}' is an image, but this server has no image encoder: start it with "
                                         "--mmproj FILE (the model's projector)",
                                         param));
  for (const auto& [key, value] : part.items())
    if (key != "type" && key != "image_url") throw bad_request(param + "." + key, fmt::format("unknown field '{}.{}'", param, key));
  const std::string up = param + ".image_url";
  if (!part.contains("image_url")) throw bad_request(up, fmt::format("'{}' is missing", up));
  const auto& iu = part["image_url"];
  std::string url;
  if (iu.is_string()) {
    url = iu.get<std::string>();
  } else if (iu.is_object() && iu.contains("url") && iu["url"].is_string()) {
    for (const auto& [key, value] : iu.items()) {
      if (key == "url") continue;
      if (key == "detail" && (value.is_null() || value == "auto")) continue;
      if (key == "detail")
        throw bad_request(up + ".detail", fmt::format("'{}.detail' {} is not implemented: an image is always seen at "
                                                      "its projector's resolution (\"auto\")",
                                                      up, value.dump()));
      throw bad_request(up + "." + key, fmt::format("unknown field '{}.{}'", up, key));
    }
    url = iu["url"].get<std::string>();
  } else {
    throw bad_request(up, fmt::format("'{}' must be {{\"url\": ...}}", up));
  }
  return {image_url_bytes(url, up + ".url", *ctx.media), param};
}

MediaPart audio_part(const nlohmann::ordered_json& part, const std::string& param, const ApiContext& ctx) {
  if (!ctx.media || !ctx.media->audio)
    throw bad_request(param, fmt::format("'{}' is audio, but this server has no audio encoder: start it with --mmproj "
                                         "FILE holding one (Ultravox, Voxtral, Qwen2-Audio)",
                                         param));
  const MediaSupport& m = *ctx.media;
  for (const auto& [key, value] : part.items())
    if (key != "type" && key != "input_audio") throw bad_request(param + "." + key, fmt::format("unknown field '{}.{}'", param, key));
  const std::string ap = param + ".input_audio";
  if (!part.contains("input_audio") || !part["input_audio"].is_object())
    throw bad_request(ap, fmt::format("'{}' must be {{\"data\": base64, \"format\": \"wav\"}}", ap));
  const auto& ia = part["input_audio"];
  std::string format;
  for (const auto& [key, value] : ia.items()) {
    if (key == "data" || key == "url") continue;
    if (key == "format") {
      if (!value.is_string()) throw bad_request(ap + ".format", fmt::format("'{}.format' must be a string", ap));
      format = value.get<std::string>();
      if (format != "wav" && format != "mp3" && format != "flac")
        throw bad_request(ap + ".format", fmt::format("'{}.format' '{}' is not wav, mp3 or flac", ap, format));
      continue;
    }
    throw bad_request(ap + "." + key, fmt::format("unknown field '{}.{}'", ap, key));
  }
  std::string bytes;
  if (ia.contains("data") && ia["data"].is_string()) {
    bytes = decoded(ia["data"].get<std::string>(), ap + ".data", m.max_audio_bytes, "audio");
  } else if (ia.contains("url") && ia["url"].is_string()) {
    const std::string url = ia["url"].get<std::string>();
    if (url.rfind("data:", 0) == 0) {
      const size_t comma = url.find(',');
      if (url.rfind("data:audio/", 0) != 0 || comma == std::string::npos || url.compare(comma - 7, 7, ";base64") != 0)
        throw bad_request(ap + ".url", fmt::format("'{}.url' must be a base64 data: URI of audio (data:audio/wav;base64,...)", ap));
      bytes = decoded(std::string_view(url).substr(comma + 1), ap + ".url", m.max_audio_bytes, "audio");
    } else {
      MediaSupport as_audio = m;
      as_audio.max_bytes = m.max_audio_bytes;
      bytes = image_url_bytes(url, ap + ".url", as_audio);
    }
  } else {
    throw bad_request(ap + ".data", fmt::format("'{}.data' (base64 audio) is missing", ap));
  }
  if (bytes.empty()) throw bad_request(ap, fmt::format("'{}' holds no audio data", ap));
  if (!format.empty()) {
    const std::span<const uint8_t> b(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    const bool wav = b.size() >= 12 && bytes.compare(0, 4, "RIFF") == 0 && bytes.compare(8, 4, "WAVE") == 0;
    const bool flac = bytes.compare(0, 4, "fLaC") == 0;
    const bool mp3 = looks_like_audio(b) && !wav && !flac;
    if ((format == "wav" && !wav) || (format == "flac" && !flac) || (format == "mp3" && !mp3))
      throw bad_request(ap + ".format", fmt::format("'{}.format' is '{}' but the data is not a {} file", ap, format, format));
  }
  return {std::move(bytes), param, true};
}

std::string prompt_object(const nlohmann::ordered_json& prompt, const std::string& param, const ApiContext& ctx,
                          std::vector<MediaPart>& parts) {
  for (const auto& [key, value] : prompt.items())
    if (key != "prompt_string" && key != "multimodal_data")
      throw bad_request(param + "." + key, fmt::format("unknown field '{}.{}' (a prompt object holds prompt_string and "
                                                       "multimodal_data)",
                                                       param, key));
  if (!prompt.contains("prompt_string") || !prompt["prompt_string"].is_string())
    throw bad_request(param + ".prompt_string", fmt::format("'{}.prompt_string' must be a string", param));
  std::string text = prompt["prompt_string"];
  if (!prompt.contains("multimodal_data") || prompt["multimodal_data"].is_null()) return text;
  const std::string dp = param + ".multimodal_data";
  const auto& data = prompt["multimodal_data"];
  if (!data.is_array()) throw bad_request(dp, fmt::format("'{}' must be an array of base64 files", dp));
  if (!ctx.media)
    throw bad_request(dp, fmt::format("'{}' holds media, but this server has no multimodal projector: start it with "
                                      "--mmproj FILE",
                                      dp));
  const MediaSupport& m = *ctx.media;
  if (m.max_images > 0 && data.size() > static_cast<size_t>(m.max_images))
    throw bad_request(dp, fmt::format("'{}' holds {} files; at most {} a request (--max-images)", dp, data.size(),
                                      m.max_images));
  for (size_t i = 0; i < data.size(); i++) {
    const std::string ep = fmt::format("{}[{}]", dp, i);
    if (!data[i].is_string()) throw bad_request(ep, fmt::format("'{}' must be a base64 string", ep));
    std::string bytes = decoded(data[i].get<std::string>(), ep, std::max(m.max_bytes, m.max_audio_bytes), "file");
    if (bytes.empty()) throw bad_request(ep, fmt::format("'{}' holds no data", ep));
    const bool audio = looks_like_audio({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    if (audio && !m.audio)
      throw bad_request(ep, fmt::format("'{}' is audio, but this server has no audio encoder", ep));
    if (!audio && !m.vision)
      throw bad_request(ep, fmt::format("'{}' is not audio (WAV, FLAC or MP3), and this server has no image encoder",
                                        ep));
    const size_t max = audio ? m.max_audio_bytes : m.max_bytes;
    if (bytes.size() > max)
      throw bad_request(ep, fmt::format("'{}' is {} bytes, more than the {} of one {}", ep, bytes.size(), max,
                                        audio ? "audio file" : "image"));
    parts.push_back({std::move(bytes), ep, audio});
  }
  return text;
}

nlohmann::ordered_json image_url_part(const std::string& media_type, const std::string& base64_data) {
  return {{"type", "image_url"}, {"image_url", {{"url", "data:" + media_type + ";base64," + base64_data}}}};
}

}  // namespace kestrel
