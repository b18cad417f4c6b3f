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
  mmdebstrap buildah skopeo umoci runc  # scripts/container.sh builds the image; the test unpacks and runs it
  libprotobuf-dev protobuf-compiler # --otlp-endpoint: OTLP's protobuf classes, generated from opentelemetry-proto
  python3 python3-regex             # the compat checker; the pre-tokenizer oracle (tests)
  python3-venv                      # the virtual environments of the Python tools below (.tools/)
  python3-jinja2                    # the Jinja oracle the template engine is tested against (tests)
  python3-jsonschema                # validates structured output against its schema (tests)
  curl openssl                      # the TLS and API-key tests (a certificate, an HTTPS client)
  libopenmpi-dev openmpi-bin        # --parallel: tensor parallelism across ranks (mpirun)
  chromium                          # the web chat page's test: a real browser (driven by puppeteer-core)
  libvulkan-dev mesa-vulkan-drivers # Vulkan: the loader and lavapipe (Vulkan compute on the CPU) for `kestrel hw`'s list
  vulkan-tools                      # vulkaninfo: the independent reference that list is tested against
  glslc spirv-tools                 # --device vulkan: the GLSL compute shaders compiled to SPIR-V at build time, validated
  libpng-dev libjpeg62-turbo-dev    # image input: PNG (libpng), JPEG (libjpeg-turbo),
  libgif-dev libwebp-dev            # GIF (giflib) and WebP (libwebp)
  libsndfile1-dev                   # audio input: WAV, FLAC (libFLAC) and MP3 (libmpg123) through libsndfile
  libjpeg-turbo-progs               # cjpeg/djpeg: tests/compat/mtmd_image_cells.py makes and measures the test JPEGs
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
for pkg in openai @anthropic-ai/sdk ollama puppeteer-core ai @ai-sdk/openai-compatible; do
  [ -d "$(dirname "$0")/../$client/node_modules/$pkg" ] || missing=1
done
if [ "$missing" = 1 ]; then
  echo "setup: installing the npm clients (openai, @anthropic-ai/sdk, ollama, puppeteer-core, ai) into $client"
  (cd "$(dirname "$0")/../$client" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "setup: the npm clients could not be installed (the registry unreachable?); the e2e tests that run" \
         "them (StockClients, AnthropicMessages, OpenAiResponses, Ollama, WebChat, ai_sdk_client) will fail until they are" >&2
fi

# The Python tools the client tests drive (tests/clients/): lm-eval-harness, LiteLLM, LangChain and schemathesis,
# every package at the version tests/clients/requirements.txt pins (the whole resolved set, installed without
# resolving again), in their own virtual environment.
clients_venv="$(cd "$(dirname "$0")/.." && pwd)/.tools/clients-venv"
requirements="$(dirname "$0")/../tests/clients/requirements.txt"
if ! cmp -s "$requirements" "$clients_venv/requirements.txt"; then
  echo "setup: installing the Python clients (lm_eval, litellm, langchain-openai, schemathesis) into .tools/clients-venv"
  rm -rf "$clients_venv"
  python3 -m venv "$clients_venv"
  "$clients_venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$requirements"
  cp "$requirements" "$clients_venv/requirements.txt"
fi

# The operator tools the deploy tests run (tests/deploy/): Helm and kubeconform from the Go module proxy, the
# Kubernetes API's JSON schemas (from the pinned Kubernetes release's OpenAPI document, converted by
# instrumenta's openapi2jsonschema in a virtual environment) and the CRD schemas of prometheus-operator's
# ServiceMonitor and KEDA's ScaledObject (converted by kubeconform's own script). All pinned; all in .tools/.
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
HELM_VERSION=v4.3.2 KUBECONFORM_VERSION=v0.8.0 KUBERNETES_VERSION=v1.34.4
PROMETHEUS_OPERATOR_VERSION=v0.85.0 KEDA_VERSION=v2.20.2
k8s_schemas="$tools/kubernetes-schemas/$KUBERNETES_VERSION-standalone-strict"
if ! command -v go >/dev/null; then
  echo "setup: no Go toolchain: Helm, kubeconform and the Kubernetes schemas are not installed; the deploy" \
       "tests (kubernetes_chart) will fail until they are" >&2
elif [ ! -x "$tools/bin/helm" ] || [ ! -x "$tools/bin/kubeconform" ] || [ ! -f "$k8s_schemas/deployment-apps-v1.json" ] ||
     [ ! -f "$tools/crd-schemas/scaledobject_v1alpha1.json" ]; then
  echo "setup: installing helm $HELM_VERSION, kubeconform $KUBECONFORM_VERSION and the Kubernetes $KUBERNETES_VERSION schemas into .tools/"
  mkdir -p "$tools/bin" "$tools/crd-schemas"
  GOBIN="$tools/bin" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  GOBIN="$tools/bin" go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  modules="$(go env GOMODCACHE)"
  (cd "$tools" && GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@$KUBERNETES_VERSION" \
     "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
     "github.com/kedacore/keda/v2@$KEDA_VERSION")
  [ -x "$tools/venv/bin/python" ] || python3 -m venv "$tools/venv"
  # openapi2jsonschema 0.9.1 pins PyYAML < 6, which no longer builds: its own calls are PyYAML 6's (SafeLoader).
  "$tools/venv/bin/pip" install -q --no-deps openapi2jsonschema==0.9.1 click==7.1.2 jsonref==0.2 colorama==0.4.6 \
    pyyaml==6.0.3
  # (A relative -o: the tool joins the working directory to it, even to an absolute one, and only prints the
  # errors that follows.)
  (cd "$tools" && venv/bin/openapi2jsonschema --kubernetes --expanded --stand-alone --strict \
     -o "kubernetes-schemas/$KUBERNETES_VERSION-standalone-strict" \
     "file://$modules/k8s.io/kubernetes@$KUBERNETES_VERSION/api/openapi-spec/swagger.json" >/dev/null)
  [ -f "$k8s_schemas/deployment-apps-v1.json" ] ||
    { echo "setup: the Kubernetes schemas were not written to $k8s_schemas" >&2; exit 1; }
  (cd "$tools/crd-schemas" && "$tools/venv/bin/python" \
     "$modules/github.com/yannh/kubeconform@$KUBECONFORM_VERSION/scripts/openapi2jsonschema.py" \
     "$modules/github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" \
     "$modules/github.com/kedacore/keda/v2@$KEDA_VERSION/config/crd/bases/keda.sh_scaledobjects.yaml" >/dev/null)
fi

# The Debian packages the container image is made of (scripts/container.sh: the ones holding the libraries
# `kestrel` links, and everything they depend on), downloaded once into a local repository so that building
# the image, in the suite too, downloads nothing. A library the binary gains must be added here (container.sh
# names it).
container_packages=(libc6 libgcc-s1 libstdc++6 libfmt9 libpcre2-8-0 libhwloc15 libxxhash0 libcpp-httplib0.11
                    libssl3 zlib1g libbrotli1 libprometheus-cpp-core1.0 libvulkan1 libudev1 libopenmpi3
                    libevent-core-2.1-7 libevent-pthreads-2.1-7 libprotobuf32
                    libpng16-16 libjpeg62-turbo libgif7 libwebp7 libsndfile1)
debs="$tools/debs"
if [ ! -f "$debs/Packages" ] || [ "$(cat "$debs/.packages" 2>/dev/null)" != "${container_packages[*]}" ]; then
  echo "setup: downloading the container image's Debian packages into .tools/debs"
  rm -rf "$debs" && mkdir -p "$debs"
  closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
              --no-enhances "${container_packages[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
  # shellcheck disable=SC2086
  (cd "$debs" && apt-get -o APT::Sandbox::User=root download $closure >/dev/null && dpkg-scanpackages . /dev/null > Packages 2>/dev/null)
  echo "${container_packages[*]}" > "$debs/.packages"
fi

# OTLP traces: the OpenTelemetry protos (opentelemetry-proto 1.5.0, from its Maven Central artifact, checked by
# its sha256), which the build generates protobuf classes from; and the OpenTelemetry Collector the trace
# tests send to, built by the collector builder at a pinned release (deploy/otelcol/builder.yaml).
OTLP_PROTO_VERSION=1.5.0-alpha
OTLP_PROTO_SHA256=03bab813f054fd931f9ccc9bf63e199b8ba33c91f661787f99a916a50a26eb32
OTELCOL_VERSION=v0.161.0
protos="$tools/opentelemetry-proto"
if [ ! -f "$protos/opentelemetry/proto/collector/trace/v1/trace_service.proto" ]; then
  echo "setup: fetching opentelemetry-proto $OTLP_PROTO_VERSION into .tools/opentelemetry-proto"
  mkdir -p "$protos"
  jar="$protos/opentelemetry-proto-$OTLP_PROTO_VERSION.jar"
  curl -sSfL -o "$jar" \
    "https://repo1.maven.org/maven2/io/opentelemetry/proto/opentelemetry-proto/$OTLP_PROTO_VERSION/opentelemetry-proto-$OTLP_PROTO_VERSION.jar"
  echo "$OTLP_PROTO_SHA256  $jar" | sha256sum -c --quiet -
  (cd "$protos" && python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall('.', [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith('.proto')])" "$jar")
fi
if command -v go >/dev/null && [ ! -x "$tools/otelcol/build/otelcol-kestrel" ]; then
  echo "setup: building the OpenTelemetry Collector $OTELCOL_VERSION (OTLP receiver, file exporter) into .tools/otelcol"
  mkdir -p "$tools/otelcol"
  GOBIN="$tools/bin" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION"
  (cd "$tools/otelcol" && "$tools/bin/builder" --config "$root/deploy/otelcol/builder.yaml" >/dev/null)
fi
