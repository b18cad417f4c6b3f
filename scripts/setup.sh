#!/usr/bin/env bash
# Installs the Debian packages Kestrel builds and tests with, if any are missing.
# Safe to run repeatedly: it only calls apt-get when something is absent.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-14-dev          # libFuzzer target for the GGUF reader
  clang-tidy                        # the model layer's function-size check (tests/layering)
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libspdlog-dev libfmt-dev libhwloc-dev libxxhash-dev libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libssl-dev           # the HTTP server: Boost.Beast over Asio, TLS via OpenSSL
  prometheus-cpp-dev                # /metrics: prometheus-cpp's registry and text exposition
  prometheus                        # tests: a real Prometheus scrapes the server; promtool lints metrics and rules
  python3 python3-regex             # the compat checker; the pre-tokenizer oracle (tests)
  python3-jinja2                    # the Jinja oracle the template engine is tested against (tests)
  python3-jsonschema                # validates structured output against its schema (tests)
  curl openssl                      # the TLS and API-key tests (a certificate, an HTTPS client)
  libopenmpi-dev openmpi-bin        # --parallel: tensor parallelism across ranks (mpirun)
  chromium                          # the web chat page's test: a real browser (driven by puppeteer-core)
  libvulkan-dev mesa-vulkan-drivers # Vulkan: the loader and lavapipe (Vulkan compute on the CPU) for `kestrel hw`'s list
  vulkan-tools                      # vulkaninfo: the independent reference that list is tested against
  glslc spirv-tools                 # --device vulkan: the GLSL compute shaders compiled to SPIR-V at build time, validated
)

# Node.js runs the stock OpenAI client in the e2e tests; the machine's own
# is used when there is one, else Debian's.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)

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

# The stock clients the e2e tests drive — `openai`, `@anthropic-ai/sdk`, `ollama`,
# and `puppeteer-core` for Debian's chromium — at the versions package-lock.json
# pins (the registry is reached only when one is not there yet).
client=tests/e2e/openai_client
missing=0
for pkg in openai @anthropic-ai/sdk ollama puppeteer-core; do
  [ -d "$(dirname "$0")/../$client/node_modules/$pkg" ] || missing=1
done
if [ "$missing" = 1 ]; then
  echo "setup: installing the npm clients (openai, @anthropic-ai/sdk, ollama, puppeteer-core) into $client"
  (cd "$(dirname "$0")/../$client" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "setup: the npm clients could not be installed (the registry unreachable?); the e2e tests that run" \
         "them (StockClients, AnthropicMessages, OpenAiResponses, Ollama, WebChat) will fail until they are" >&2
fi
