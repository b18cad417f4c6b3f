#include "serving/http/router.h"

#include <fmt/format.h>

#include "core/error.h"
#include "serving/api/openai_api.h"

namespace kestrel {

void Router::add(std::string method, std::string path, RouteHandler handler) {
  for (const auto& r : routes_)
    if (r.method == method && r.path == path) throw Error(fmt::format("route {} {} registered twice", method, path));
  routes_.push_back({std::move(method), std::move(path), std::move(handler)});
}

HttpResponse Router::handle(const HttpRequest& request) const {
  std::string allowed;  // the methods the path has, for a 405's Allow header
  for (const auto& r : routes_) {
    const bool prefix = r.path.size() >= 2 && r.path.compare(r.path.size() - 2, 2, "/*") == 0;
    const bool match = prefix ? request.path.size() > r.path.size() - 1 &&
                                    request.path.compare(0, r.path.size() - 1, r.path, 0, r.path.size() - 1) == 0
                              : r.path == request.path;
    if (!match) continue;
    if (r.method == request.method) return r.handler(request);
    allowed += (allowed.empty() ? "" : ", ") + r.method;
  }
  const int status = allowed.empty() ? 404 : 405;
  const std::string what = allowed.empty() ? "no such endpoint" : "method not allowed";
  HttpResponse res = error_response({status, fmt::format("{} {}: {}", request.method, request.path, what), "",
                                     "invalid_request_error", ""});
  if (!allowed.empty()) res.headers.emplace_back("Allow", allowed);
  return res;
}

}  // namespace kestrel
