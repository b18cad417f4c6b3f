#pragma once
// Images in requests, as the APIs send them (serve --mmproj): OpenAI's image_url parts (a data: URI, raw base64,
// or file:// under --media-path; http(s) URLs are not fetched), which the other fronts' images become (Anthropic's
// base64 image blocks, the Responses API's input_image, Ollama's images). Every problem is a 400 naming the part.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/api/openai_api.h"

namespace kestrel {

// The bytes of an image_url part's `url` (param names the part in errors).
std::string image_url_bytes(const std::string& url, const std::string& param, const MediaSupport& media);

// An OpenAI image_url part ({"type": "image_url", "image_url": {"url", "detail"?}}) as a MediaPart; 400 when the
// server has no image encoder.
MediaPart image_part(const nlohmann::ordered_json& part, const std::string& param, const ApiContext& ctx);

// An OpenAI input_audio part ({"type": "input_audio", "input_audio": {"data": base64, "format"?: "wav" | "mp3" |
// "flac"}}; llama-server's "url" in place of data is read as image_url's) as a MediaPart; 400 when the server has no
// audio encoder or the format named is not the data's.
MediaPart audio_part(const nlohmann::ordered_json& part, const std::string& param, const ApiContext& ctx);

// llama-server's prompt object {"prompt_string": text, "multimodal_data": [base64 file, ...]} (its /completion's and
// /v1/completions'): each file an image or, told by its magic bytes as libmtmd tells it, audio; the files go where
// the text has the media marker, in order. Returns the text; parts receives the files (none without
// multimodal_data). Every problem is a 400 naming `param` or the entry.
std::string prompt_object(const nlohmann::ordered_json& prompt, const std::string& param, const ApiContext& ctx,
                          std::vector<MediaPart>& parts);

// An OpenAI image_url part carrying a data: URI of these bytes' media type (what the other fronts build).
nlohmann::ordered_json image_url_part(const std::string& media_type, const std::string& base64_data);

}  // namespace kestrel
