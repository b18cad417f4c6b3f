#pragma once
// What the server says of itself before and after it can serve: /health is
// liveness (the process answers: always 200) and /ready is readiness (200
// once the model is loaded and warmed; 503 with the reason while it loads,
// naming the stage and how long it has taken, and while it drains after
// SIGTERM). The server listens from its start, so an orchestrator's probes
// see the load's progress instead of a refused connection. Thread-safe.
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "serving/http/http_types.h"

namespace kestrel {

class Readiness {
 public:
  enum class State { Loading, Ready, Draining };

  Readiness();
  void loading(std::string stage);  // a startup stage begins (the one before it ends)
  void ready();
  void draining(std::string why);
  State state() const;

  HttpResponse health() const;  // GET /health
  HttpResponse ready_response() const;  // GET /ready
  // Any API route before the model is ready: 503 with Retry-After, an OpenAI-style error naming the stage.
  HttpResponse unavailable(const HttpRequest& req) const;

 private:
  using Clock = std::chrono::steady_clock;
  double seconds_since(Clock::time_point t) const;
  mutable std::mutex mutex_;
  State state_ = State::Loading;
  Clock::time_point started_ = Clock::now(), stage_started_ = started_, ready_at_{};
  std::string stage_ = "starting", why_;
  struct Done {
    std::string stage;
    double seconds;
  };
  std::vector<Done> done_;  // the stages finished, in order
};

}  // namespace kestrel
