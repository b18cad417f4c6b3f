#pragma once
// The sha256 (hex) of bytes in memory, by OpenSSL (tests that check a generated file's bytes or a decoder's output
// against a recorded digest).
#include <fmt/format.h>
#include <openssl/evp.h>

#include <cstddef>
#include <string>

namespace kestrel::test {

inline std::string sha256_hex(const void* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < len; i++) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace kestrel::test
