#include "serving/api/media_input.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "core/base64.h"

namespace kestrel {

namespace {

// Base64 text of at most one image's bytes, decoded (its length refused before decoding).
std::string decoded(std::string_view text, const std::string& param, const MediaSupport& m) {
  if (text.size() > m.max_bytes / 3 * 4 + 4)
    throw bad_request(param, fmt::format("'{}' holds more than {} bytes (the limit of one image)", param, m.max_bytes));
  auto bytes = base64_decode(text);
  if (!bytes) throw bad_request(param, fmt::format("'{}' is not valid base64 image data", param));
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
    bytes = decoded(std::string_view(url).substr(comma + 1), param, m);
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
    bytes = decoded(url, param, m);  // raw base64, as llama-server takes it
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

nlohmann::ordered_json image_url_part(const std::string& media_type, const std::string& base64_data) {
  return {{"type", "image_url"}, {"image_url", {{"url", "data:" + media_type + ";base64," + base64_data}}}};
}

}  // namespace kestrel
