#include "serving/telemetry/otlp_exporter.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <regex>

#include "core/error.h"
#include "serving/engine/metrics.h"

namespace kestrel {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The first of the variables that is set.
std::string env_first(std::initializer_list<const char*> names, const char** which = nullptr) {
  for (const char* n : names)
    if (const std::string v = env(n); !v.empty()) {
      if (which) *which = n;
      return v;
    }
  return "";
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "k1=v1,k2=v2" (W3C Baggage's form, values percent-decoded), as OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES are written.
std::vector<std::pair<std::string, std::string>> key_values(const std::string& text, const char* what) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    const std::string item = trim(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0)
        throw Error(fmt::format("{} '{}': '{}' is not key=value", what, text, item));
      std::string v;
      const std::string raw = trim(item.substr(eq + 1));
      for (size_t i = 0; i < raw.size(); i++) {
        if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
          v += static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          v += raw[i];
        }
      }
      out.emplace_back(trim(item.substr(0, eq)), v);
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// http://HOST[:PORT][/PATH]: the host, the port (80) and the path ("/"); nothing for another form.
struct HttpUrl {
  std::string host, path;
  int port = 80;
};
std::optional<HttpUrl> parse_http_url(const std::string& url) {
  static const std::regex re(R"(^http://([^/:]+)(?::([0-9]{1,5}))?(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, re)) return std::nullopt;
  const int port = m[2].matched ? std::stoi(m[2]) : 80;
  if (port < 1 || port > 65535) return std::nullopt;
  return HttpUrl{m[1], m[3].matched ? m[3].str() : "/", port};
}

}  // namespace

OtlpConfig otlp_config(const std::string& flag_endpoint, const std::string& service_version) {
  OtlpConfig c;
  if (env("OTEL_SDK_DISABLED") == "true" && flag_endpoint.empty()) return c;
  // A traces endpoint is used as it is; a base endpoint gets /v1/traces (the OTLP exporter specification).
  std::string url = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  if (!flag_endpoint.empty() || url.empty()) {
    std::string base = flag_endpoint.empty() ? env("OTEL_EXPORTER_OTLP_ENDPOINT") : flag_endpoint;
    if (base.empty()) return c;
    while (!base.empty() && base.back() == '/') base.pop_back();
    url = base + "/v1/traces";
  }
  const char* which = nullptr;
  const std::string protocol =
      env_first({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"}, &which);
  if (!protocol.empty() && protocol != "http/protobuf")
    throw Error(fmt::format("{}={}: only http/protobuf is implemented (OTLP over HTTP with protobuf bodies)", which,
                            protocol));
  if (!parse_http_url(url))
    throw Error(fmt::format("OTLP endpoint '{}' is not http://HOST[:PORT][/PATH] with a port of 1 to 65535 (https is not implemented: "
                            "send to a collector on this host or beside the pod)",
                            url));
  c.endpoint = url;
  for (auto& [k, v] : key_values(env_first({"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}),
                                 "OTEL_EXPORTER_OTLP_HEADERS"))
    c.headers[k] = v;
  if (const std::string t = env_first({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}, &which);
      !t.empty()) {
    char* end = nullptr;
    const long ms = std::strtol(t.c_str(), &end, 10);
    if (*end != '\0' || ms <= 0 || ms > 600000)
      throw Error(fmt::format("{}={}: not a timeout in milliseconds (1 to 600000)", which, t));
    c.timeout_ms = static_cast<int>(ms);
  }
  const std::string sampler = env("OTEL_TRACES_SAMPLER");
  if (sampler == "always_on") c.parent_sampling = false;
  else if (sampler == "always_off") c.always_off = true, c.parent_sampling = false;
  else if (sampler == "parentbased_always_off") c.always_off = true;
  else if (!sampler.empty() && sampler != "parentbased_always_on")
    throw Error(fmt::format("OTEL_TRACES_SAMPLER={}: implemented are always_on, always_off, parentbased_always_on "
                            "(the default) and parentbased_always_off",
                            sampler));
  std::string service = env("OTEL_SERVICE_NAME");
  std::vector<Attribute> extra;
  for (auto& [k, v] : key_values(env("OTEL_RESOURCE_ATTRIBUTES"), "OTEL_RESOURCE_ATTRIBUTES")) {
    if (k == "service.name" && service.empty()) service = v;
    else if (k != "service.name") extra.push_back({k, v});
  }
  c.resource.push_back({"service.name", service.empty() ? std::string("kestrel") : service});
  c.resource.push_back({"service.version", service_version});
  c.resource.push_back({"telemetry.sdk.name", std::string("kestrel")});
  c.resource.push_back({"telemetry.sdk.language", std::string("cpp")});
  for (auto& a : extra) c.resource.push_back(std::move(a));
  if (!otlp_supported())
    throw Error("this build has no OTLP encoder (protobuf and the OpenTelemetry protos were not found when it was "
                "configured: run scripts/setup.sh and rebuild)");
  return c;
}

SpanExporter::SpanExporter(OtlpConfig config, ServerMetrics* metrics) : c_(std::move(config)), metrics_(metrics) {
  const auto url = parse_http_url(c_.endpoint);
  if (!url) throw Error(fmt::format("OTLP endpoint '{}' is not http://HOST[:PORT][/PATH]", c_.endpoint));
  host_ = url->host;
  port_ = url->port;
  path_ = url->path;
  thread_ = std::thread([this] { run(); });
}

SpanExporter::~SpanExporter() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void SpanExporter::dropped(size_t n, const char* reason) {
  if (metrics_ && n > 0) metrics_->add("kestrel_otlp_spans_dropped_total", static_cast<double>(n), reason);
}

void SpanExporter::submit(std::vector<SpanData> spans) {
  size_t lost = 0;
  bool full_batch = false;
  {
    std::lock_guard lock(mutex_);
    for (auto& s : spans) {
      if (queue_.size() >= c_.max_queue) {
        lost++;
        continue;
      }
      queue_.push_back(std::move(s));
    }
    full_batch = queue_.size() >= c_.max_batch;
  }
  dropped(lost, "queue_full");
  if (full_batch) wake_.notify_all();
}

void SpanExporter::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, std::chrono::milliseconds(c_.interval_ms),
                   [&] { return stop_ || queue_.size() >= c_.max_batch; });
    while (!queue_.empty()) {
      const size_t n = std::min(queue_.size(), c_.max_batch);
      std::vector<SpanData> batch(std::make_move_iterator(queue_.begin()),
                                  std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(n)));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
      lock.unlock();
      const bool sent = send(batch);
      if (metrics_) {
        if (sent) metrics_->add("kestrel_otlp_spans_exported_total", static_cast<double>(batch.size()));
        else dropped(batch.size(), "export_failed");
      }
      lock.lock();
      if (!sent && stop_) {  // the collector is gone: what is left goes too, counted
        dropped(queue_.size(), "export_failed");
        queue_.clear();
      }
      if (!stop_ && queue_.size() < c_.max_batch) break;  // wait for the next interval
    }
    if (stop_ && queue_.empty()) return;
  }
}

bool SpanExporter::send(const std::vector<SpanData>& batch) {
  std::string body;
  try {
    body = encode_otlp_traces(c_.resource, batch);
  } catch (const std::exception& e) {
    fmt::print(stderr, "[kestrel] OTLP: {}\n", e.what());
    return false;
  }
  httplib::Client client(host_, port_);
  const auto timeout = std::chrono::milliseconds(c_.timeout_ms);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  httplib::Headers headers;
  for (const auto& [k, v] : c_.headers) headers.emplace(k, v);
  const auto r = client.Post(path_, headers, body, "application/x-protobuf");
  if (!r) {
    fmt::print(stderr, "[kestrel] OTLP: {} spans not sent to {}: {}\n", batch.size(), c_.endpoint,
               httplib::to_string(r.error()));
    return false;
  }
  if (r->status != 200) {
    fmt::print(stderr, "[kestrel] OTLP: {} spans refused by {}: HTTP {}\n", batch.size(), c_.endpoint, r->status);
    return false;
  }
  return true;
}

}  // namespace kestrel
