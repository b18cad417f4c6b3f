#pragma once
// A route's slow part (parsing a large body, tokenizing a prompt) runs off
// the transport's network threads: the route answers at once with an
// OffloadedResponse, whose job runs on whatever executor the transport
// gives (a small pool); the transport polls it when the job is done.
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "serving/http/http_types.h"

namespace kestrel {

// Runs a task somewhere, later or now. Empty: run it at once (in-process
// callers and tests).
using Offload = std::function<void(std::function<void()>)>;

class OffloadedResponse : public DeferredResponse, public std::enable_shared_from_this<OffloadedResponse> {
 public:
  // A response whose `later` is `job`'s answer, computed through `offload`.
  // An exception from the job is a 500 naming it.
  static HttpResponse start(const Offload& offload, std::function<HttpResponse()> job);

  void on_ready(std::function<void()> ready) override;
  std::optional<HttpResponse> poll() override;
  // Before the job is done or polled: whatever it produces is closed too
  // (a submitted request is cancelled).
  void close(bool completed) override;

 private:
  void finish(HttpResponse r);

  std::mutex mutex_;
  std::optional<HttpResponse> result_;
  std::function<void()> ready_;
  bool closed_ = false;
};

}  // namespace kestrel
