#!/usr/bin/env bash
# Installs the Debian packages Kestrel builds and tests with, if any are missing.
# Safe to run repeatedly: it only calls apt-get when something is absent.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev          # libFuzzer target for the GGUF reader
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libspdlog-dev libfmt-dev libhwloc-dev libxxhash-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libssl-dev           # the HTTP server: Boost.Beast over Asio, TLS via OpenSSL
  python3 python3-regex             # the compat checker; the pre-tokenizer oracle (tests)
  curl openssl                      # the TLS and API-key tests (a certificate, an HTTPS client)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
