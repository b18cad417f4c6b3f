// A build without protobuf or the OpenTelemetry protos (scripts/setup.sh fetches them): no OTLP encoder,
// and --otlp-endpoint says so (otlp_config).
#include "core/error.h"
#include "serving/telemetry/otlp_exporter.h"

namespace kestrel {

bool otlp_supported() { return false; }

std::string encode_otlp_traces(const std::vector<Attribute>&, const std::vector<SpanData>&) {
  throw Error("this build has no OTLP encoder: run scripts/setup.sh and rebuild");
}

}  // namespace kestrel
