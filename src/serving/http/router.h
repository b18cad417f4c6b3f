#pragma once
// The routing table: (method, path) -> handler. A path nobody serves is a
// 404 and a known path with another method a 405, both with an OpenAI-style
// error body, so a client always gets JSON it can read.
#include <atomic>
#include <functional>
#include <memory>
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

// The table in use, replaced whole (the startup table until the model is ready, then the API's): a request
// holds the one it started with.
class RouterSlot {
 public:
  std::shared_ptr<const Router> get() const { return router_.load(); }
  void set(std::shared_ptr<const Router> router) { router_.store(std::move(router)); }

 private:
  std::atomic<std::shared_ptr<const Router>> router_;
};

}  // namespace kestrel
