#pragma once
// Base64 (RFC 4648, with padding) through OpenSSL's encoder: embeddings'
// encoding_format "base64", the Responses API's opaque reasoning content.
#include <optional>
#include <string>
#include <string_view>

namespace kestrel {

std::string base64_encode(std::string_view bytes);
// Nothing when the text is not valid base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace kestrel
