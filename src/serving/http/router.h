#pragma once
// The routing table: (method, path) -> handler. A path nobody serves is a
// 404 and a known path with another method a 405, both with an OpenAI-style
// error body, so a client always gets JSON it can read.
#include <functional>
#include <string>
#include <vector>

#include "serving/http/http_types.h"

namespace kestrel {

using RouteHandler = std::function<HttpResponse(const HttpRequest&)>;

class Router {
 public:
  // A path ending in "/*" serves every longer path under it (GET /v1/models/{id}).
  void add(std::string method, std::string path, RouteHandler handler);
  HttpResponse handle(const HttpRequest& request) const;

  struct Route {
    std::string method, path;
    RouteHandler handler;
  };
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace kestrel
