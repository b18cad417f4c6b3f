#include "serving/http/readiness.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "serving/api/openai_api.h"

namespace kestrel {
namespace {

double rounded(double s) { return std::round(s * 1000) / 1000; }  // milliseconds are enough

}  // namespace

Readiness::Readiness() = default;

double Readiness::seconds_since(Clock::time_point t) const {
  return rounded(std::chrono::duration<double>(Clock::now() - t).count());
}

void Readiness::loading(std::string stage) {
  std::lock_guard lock(mutex_);
  if (state_ != State::Loading) return;
  done_.push_back({stage_, seconds_since(stage_started_)});
  stage_ = std::move(stage);
  stage_started_ = Clock::now();
}

void Readiness::ready() {
  std::lock_guard lock(mutex_);
  if (state_ != State::Loading) return;
  done_.push_back({stage_, seconds_since(stage_started_)});
  state_ = State::Ready;
  ready_at_ = Clock::now();
}

void Readiness::draining(std::string why) {
  std::lock_guard lock(mutex_);
  state_ = State::Draining;
  why_ = std::move(why);
}

Readiness::State Readiness::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

HttpResponse Readiness::health() const {
  std::lock_guard lock(mutex_);
  const char* status = state_ == State::Loading ? "loading" : state_ == State::Ready ? "ok" : "draining";
  return json_response(nlohmann::json{{"status", status}}.dump());
}

HttpResponse Readiness::ready_response() const {
  std::lock_guard lock(mutex_);
  nlohmann::json stages = nlohmann::json::array();
  for (const Done& d : done_) stages.push_back({{"stage", d.stage}, {"seconds", d.seconds}});
  nlohmann::json body;
  int status = 503;
  switch (state_) {
    case State::Loading:
      body = {{"status", "loading"},
              {"reason", fmt::format("the model is loading ({})", stage_)},
              {"stage", stage_},
              {"stage_seconds", seconds_since(stage_started_)},
              {"elapsed_seconds", seconds_since(started_)},
              {"stages_done", stages}};
      break;
    case State::Ready:
      status = 200;
      body = {{"status", "ready"},
              {"startup_seconds", rounded(std::chrono::duration<double>(ready_at_ - started_).count())},
              {"stages", stages}};
      break;
    case State::Draining:
      body = {{"status", "draining"}, {"reason", why_}};
      break;
  }
  HttpResponse r = json_response(body.dump(), status);
  if (status == 503) r.headers.emplace_back("Retry-After", state_ == State::Loading ? "5" : "30");
  return r;
}

HttpResponse Readiness::unavailable(const HttpRequest& req) const {
  std::string stage;
  {
    std::lock_guard lock(mutex_);
    stage = stage_;
  }
  HttpResponse r = error_response({503,
                                   fmt::format("{} {}: the server is still loading its model ({}); GET /ready says "
                                               "when it can serve",
                                               req.method, req.path, stage),
                                   "", "unavailable", "model_loading"});
  r.headers.emplace_back("Retry-After", "5");
  return r;
}

}  // namespace kestrel
