#include "serving/http/offload.h"

#include <exception>
#include <utility>

#include "serving/api/openai_api.h"

namespace kestrel {
namespace {

// A response nobody will send: what it holds is given up.
void discard(HttpResponse& r) {
  if (r.stream) r.stream->close(false);
  if (r.later) r.later->close(false);
}

}  // namespace

HttpResponse OffloadedResponse::start(const Offload& offload, std::function<HttpResponse()> job) {
  auto self = std::make_shared<OffloadedResponse>();
  auto task = [self, job = std::move(job)] {
    HttpResponse r;
    try {
      r = job();
    } catch (const std::exception& e) {
      r = internal_error_response(e);
    }
    self->finish(std::move(r));
  };
  if (offload)
    offload(std::move(task));
  else
    task();
  HttpResponse r;
  r.later = self;
  return r;
}

void OffloadedResponse::finish(HttpResponse r) {
  std::function<void()> ready;
  {
    std::lock_guard lock(mutex_);
    if (closed_) {
      discard(r);
      return;
    }
    result_ = std::move(r);
    ready = ready_;
  }
  if (ready) ready();
}

void OffloadedResponse::on_ready(std::function<void()> ready) {
  bool done = false;
  {
    std::lock_guard lock(mutex_);
    ready_ = ready;
    done = result_.has_value();
  }
  if (done && ready) ready();
}

std::optional<HttpResponse> OffloadedResponse::poll() {
  std::lock_guard lock(mutex_);
  std::optional<HttpResponse> out = std::move(result_);
  result_.reset();
  return out;
}

void OffloadedResponse::close(bool) {
  std::lock_guard lock(mutex_);
  closed_ = true;
  if (result_) discard(*result_);
  result_.reset();
}

}  // namespace kestrel
