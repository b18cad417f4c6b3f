#include "serving/models/model_manager.h"

#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "serving/api/anthropic_api.h"
#include "serving/api/ollama_api.h"
#include "serving/api/openai_api.h"
#include "serving/api/openapi_document.h"

namespace kestrel {
namespace fs = std::filesystem;
using json = nlohmann::json;

struct ModelManager::Entry {
  ModelSpec spec;
  std::unique_ptr<ServerMetrics> metrics;  // kept across loads: its counters go on
  bool ever_loaded = false;
  State state = State::Unloaded;
  std::string stage;    // Loading: the load's progress
  std::string error;    // Failed: why
  std::string refusal;  // why the last load could not start (no room)
  fs::file_time_type failed_mtime{};
  std::unique_ptr<HostedModel> host;
  int in_flight = 0;
  Clock::time_point last_used{};
  std::optional<double> keep_alive;  // the last request's (Ollama's keep_alive, seconds; infinity: never)
  bool unload_when_idle = false, unload_queued = false;
  bool unload_idle = false;  // the pending unload is the idle timer's (a new request cancels it)
  std::vector<std::function<void()>> waiters;  // requests waiting for a load to end
  double load_s = 0;
  int64_t bytes = 0;
  int64_t created = 0;
};

// A request in flight on a model: the model is not unloaded until every lease is gone.
struct ModelManager::Lease {
  Lease(ModelManager* manager, Entry* entry, std::optional<double> keep) : m(manager), e(entry), keep_alive(keep) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { m->release(*e, keep_alive); }
  ModelManager* m;
  Entry* e;
  std::optional<double> keep_alive;
};

namespace {

int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = path.empty() ? 0 : fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(n);
}

std::string mib(int64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// The lease travels with the response until its transport closes it.
class LeasedStream : public BodyStream {
 public:
  LeasedStream(std::shared_ptr<BodyStream> inner, std::shared_ptr<void> lease)
      : inner_(std::move(inner)), lease_(std::move(lease)) {}
  void on_ready(std::function<void()> ready) override { inner_->on_ready(std::move(ready)); }
  StreamStep poll(std::string& out) override { return inner_->poll(out); }
  void close(bool completed) override {
    inner_->close(completed);
    lease_.reset();
  }

 private:
  std::shared_ptr<BodyStream> inner_;
  std::shared_ptr<void> lease_;
};

HttpResponse leased(HttpResponse r, const std::shared_ptr<void>& lease);

class LeasedLater : public DeferredResponse {
 public:
  LeasedLater(std::shared_ptr<DeferredResponse> inner, std::shared_ptr<void> lease)
      : inner_(std::move(inner)), lease_(std::move(lease)) {}
  void on_ready(std::function<void()> ready) override { inner_->on_ready(std::move(ready)); }
  std::optional<HttpResponse> poll() override {
    std::optional<HttpResponse> r = inner_->poll();
    if (r && lease_) *r = leased(std::move(*r), lease_);
    return r;
  }
  void close(bool completed) override {
    inner_->close(completed);
    lease_.reset();
  }

 private:
  std::shared_ptr<DeferredResponse> inner_;
  std::shared_ptr<void> lease_;
};

HttpResponse leased(HttpResponse r, const std::shared_ptr<void>& lease) {
  if (r.later)
    r.later = std::make_shared<LeasedLater>(std::move(r.later), lease);
  else if (r.stream)
    r.stream = std::make_shared<LeasedStream>(std::move(r.stream), lease);
  return r;
}

// A refusal in the shape of the API the path speaks.
HttpResponse refusal(const HttpRequest& req, const ApiError& e) {
  if (req.path.rfind("/api/", 0) == 0) return ollama_error_response(e);
  if (req.path.rfind("/v1/messages", 0) == 0) return anthropic_error_response(e);
  return error_response(e);
}

// Ollama's keep_alive: seconds (a number, or a duration such as "5m", "1h30m", "10s", "250ms"); negative: never
// unload (infinity); 0: unload after the reply.
double keep_alive_seconds(const json& v) {
  if (v.is_number()) {
    const double s = v.get<double>();
    return s < 0 ? std::numeric_limits<double>::infinity() : s;
  }
  if (!v.is_string()) throw bad_request("keep_alive", "'keep_alive' must be a number of seconds or a duration like \"5m\"");
  const std::string s = v.get<std::string>();
  size_t i = 0;
  double total = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) i = 1;
  bool any = false;
  while (i < s.size()) {
    size_t used = 0;
    double n = 0;
    try {
      n = std::stod(s.substr(i), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0) throw bad_request("keep_alive", fmt::format("keep_alive '{}' is not a duration like \"5m\"", s));
    i += used;
    std::string unit;
    while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) unit += s[i++];
    const double scale = unit == "h" ? 3600 : unit == "m" ? 60 : unit == "s" || unit.empty() ? 1 : unit == "ms" ? 1e-3 : -1;
    if (scale < 0) throw bad_request("keep_alive", fmt::format("keep_alive '{}': unit '{}' is not h, m, s or ms", s, unit));
    total += n * scale;
    any = true;
  }
  if (!any) throw bad_request("keep_alive", "keep_alive is empty");
  return negative && total > 0 ? std::numeric_limits<double>::infinity() : total;
}

// Ollama loads a model for a /api/generate without a prompt and a /api/chat without messages (and with
// keep_alive 0, unloads it).
bool ollama_load_only(const HttpRequest& req, const json& body) {
  if (req.method != "POST") return false;
  if (req.path == "/api/generate")
    return !body.contains("prompt") || (body["prompt"].is_string() && body["prompt"].get<std::string>().empty());
  if (req.path == "/api/chat")
    return !body.contains("messages") || (body["messages"].is_array() && body["messages"].empty());
  return false;
}

}  // namespace

const char* ModelManager::state_name(State s) {
  switch (s) {
    case State::Unloaded: return "unloaded";
    case State::Loading: return "loading";
    case State::Loaded: return "loaded";
    case State::Unloading: return "unloading";
    case State::Failed: return "unloaded";  // (llama-server's value, with "failed": true)
  }
  return "unloaded";
}

ModelManager::ModelManager(std::vector<ModelSpec> models, ModelManagerConfig config, ModelLoader loader,
                           ServerMetrics& server_metrics)
    : c_(config), loader_(std::move(loader)), server_metrics_(server_metrics) {
  if (models.empty()) throw Error("no models to serve (--models-dir holds no GGUF file, and no preset names one)");
  std::map<std::string, std::string> taken;  // name -> the model it names
  for (auto& m : models) {
    auto e = std::make_unique<Entry>();
    for (const std::string* n : [&] {
           std::vector<const std::string*> v{&m.name};
           for (const auto& a : m.aliases) v.push_back(&a);
           return v;
         }()) {
      if (auto [it, fresh] = taken.emplace(*n, m.name); !fresh)
        throw Error(fmt::format("two models are named '{}' ({} and {})", *n, it->second, m.path));
    }
    e->metrics = std::make_unique<ServerMetrics>(m.name);
    e->spec = std::move(m);
    e->created = ApiRoutes::unix_seconds();
    entries_.push_back(std::move(e));
  }
  update_gauges();
}

ModelManager::~ModelManager() {
  offload_ = nullptr;  // (the transport may be gone: anything left runs here)
  shutdown(0);
  for (auto& e : entries_) e->host.reset();
}

std::vector<std::string> ModelManager::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e->spec.name);
  return out;
}

void ModelManager::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { worker(); });
  for (auto& e : entries_)
    if (e->spec.load_on_startup) request_load(*e);
}

void ModelManager::set_draining() {
  std::lock_guard lock(mutex_);
  draining_ = true;
  for (auto& e : entries_)
    if (e->host) e->host->api().set_draining();
}

void ModelManager::shutdown(int deadline_ms) {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Requests still waiting for a load that will not run now are answered (a 503) instead of left hanging.
  std::vector<std::function<void()>> waiting;
  {
    std::lock_guard lock(mutex_);
    draining_ = true;
    for (auto& e : entries_)
      for (auto& w : e->waiters) waiting.push_back(std::move(w));
    for (auto& e : entries_) e->waiters.clear();
  }
  for (auto& w : waiting) offload_ ? offload_(std::move(w)) : w();
  std::vector<std::thread> stopping;
  for (auto& e : entries_)
    if (e->host) stopping.emplace_back([h = e->host.get(), deadline_ms] { h->engine().shutdown(deadline_ms); });
  for (auto& t : stopping) t.join();
}

ModelManager::Entry* ModelManager::find(const std::string& name) {
  for (auto& e : entries_) {
    if (e->spec.name == name || e->spec.name + ":latest" == name) return e.get();
    for (const auto& a : e->spec.aliases)
      if (a == name || a + ":latest" == name) return e.get();
  }
  return nullptr;
}

const ModelManager::Entry* ModelManager::find(const std::string& name) const {
  return const_cast<ModelManager*>(this)->find(name);
}

void ModelManager::install(Router& router) {
  router.add("GET", "/", [](const HttpRequest&) { return ApiRoutes::chat_page(); });
  router.add("GET", "/metrics", [this](const HttpRequest&) { return metrics(); });
  router.add("GET", "/v1/models", [this](const HttpRequest&) { return list_models(); });
  router.add("GET", "/models", [this](const HttpRequest&) { return list_models(); });
  router.add("GET", "/v1/models/*", [this](const HttpRequest& r) { return model_card(r); });
  router.add("POST", "/models/load", [this](const HttpRequest& r) { return load_request(r); });
  router.add("POST", "/models/unload", [this](const HttpRequest& r) { return unload_request(r); });
  router.add("GET", "/api/tags", [this](const HttpRequest&) { return ollama_tags(false); });
  router.add("GET", "/api/ps", [this](const HttpRequest&) { return ollama_tags(true); });
  router.add("GET", "/api/version", [](const HttpRequest&) {
    return json_response(json_text({{"version", kOllamaApiVersion}}));
  });
  router.add("GET", "/openapi.json", [this](const HttpRequest&) {
    json doc = json::parse(openapi_json());
    json names = json::array();
    std::lock_guard lock(mutex_);
    for (const auto& e : entries_) {
      names.push_back(e->spec.name);
      for (const auto& a : e->spec.aliases) names.push_back(a);
    }
    doc["components"]["schemas"]["ModelName"]["enum"] = names;
    return json_response(doc.dump());
  });
  router.add("GET", "/props", [this](const HttpRequest& r) { return props(r); });
  router.add("GET", "/v1/responses/*", [this](const HttpRequest& r) { return stored_response(r); });
  for (const char* method : {"GET", "POST", "DELETE"})
    router.add(method, "/*", [this](const HttpRequest& r) { return dispatch(r); });
}

HttpResponse ModelManager::dispatch(const HttpRequest& req) {
  const auto run = [this, req]() -> HttpResponse {
    try {
      std::string name;
      std::optional<double> keep_alive;
      bool load_only = false;
      if (req.method == "GET" || req.method == "DELETE") {
        name = req.query_param("model");
      } else {
        const auto body = parse_body(req.body);
        if (body.is_object()) {
          const char* key = req.path == "/api/show" && !body.contains("model") ? "name" : "model";
          if (body.contains(key) && !body[key].is_string()) throw bad_request("model", "'model' must be a string");
          if (body.contains(key)) name = body[key].get<std::string>();
          if (body.contains("keep_alive") && !body["keep_alive"].is_null())
            keep_alive = keep_alive_seconds(body["keep_alive"]);
          load_only = ollama_load_only(req, body);
        }
        if (name.empty()) name = req.query_param("model");  // (a body without one: POST /lora-adapters, /slots)
      }
      if (name.empty())
        throw bad_request("model", "model name is missing from the request (this server serves several models: GET "
                                   "/v1/models lists them)");
      const std::string autoload = req.query_param("autoload");
      return route(req, {name, keep_alive, load_only},
                   autoload.empty() ? c_.autoload : autoload == "true" || autoload == "1", false);
    } catch (const ApiError& e) {
      return refusal(req, e);
    }
  };
  if (req.body.size() <= ApiRoutes::kInlineBodyBytes) return run();
  return OffloadedResponse::start(offload_, run);  // (a large body is parsed off the network thread)
}

HttpResponse ModelManager::route(const HttpRequest& req, const Target& t, bool autoload, bool after_load) {
  const std::string& name = t.name;
  const std::optional<double>& keep_alive = t.keep_alive;
  const bool load_only = t.load_only;
  std::unique_lock lock(mutex_);
  if (draining_)
    return refusal(req, {503, "the server is shutting down", "", "server_error", "draining"});
  Entry* e = find(name);
  if (!e) {
    std::vector<std::string> names;
    for (const auto& x : entries_) names.push_back(x->spec.name);
    return refusal(req, {404, model_not_found_message(name, names), "model", "invalid_request_error", "model_not_found"});
  }
  if (load_only && keep_alive && *keep_alive == 0) {  // Ollama's unload
    request_unload(*e, "keep_alive 0");
    lock.unlock();
    return ollama_load_or_unload(req, *e, 0);
  }
  if (e->state == State::Loaded) {
    if (e->unload_idle) e->unload_when_idle = e->unload_idle = false;  // used again: no longer idle
    e->in_flight++;
    e->last_used = Clock::now();
    auto lease = std::make_shared<Lease>(this, e, keep_alive);
    HostedModel* host = e->host.get();
    lock.unlock();
    if (load_only) return ollama_load_or_unload(req, *e, keep_alive.value_or(-1));
    return leased(host->routes().handle(req), lease);
  }
  if (e->state == State::Failed) {
    std::error_code ec;
    const bool changed = fs::last_write_time(e->spec.path, ec) != e->failed_mtime;
    if (after_load || !autoload || !changed)
      return refusal(req, {500, fmt::format("model '{}' failed to load: {}", e->spec.name, e->error), "model",
                           "server_error", "model_load_failed"});
  }
  if (after_load) {
    HttpResponse r = refusal(
        req, {503,
              e->refusal.empty() ? fmt::format("model '{}' was unloaded before the request could run; retry", name)
                                 : e->refusal,
              "model", "server_error", "model_unavailable"});
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  if (e->state != State::Loading && !autoload)
    return refusal(req, {400,
                         fmt::format("model '{}' is not loaded, and this server does not load models on demand "
                                     "(--no-models-autoload): POST /models/load first",
                                     e->spec.name),
                         "model", "invalid_request_error", "model_not_loaded"});
  if (e->state == State::Unloaded || e->state == State::Failed) request_load(*e);
  return OffloadedResponse::start([e](std::function<void()> task) { e->waiters.push_back(std::move(task)); },
                                  [this, req, t] {
                                    try {
                                      return route(req, t, true, true);
                                    } catch (const ApiError& x) {  // (not a std::exception: the job's own catch
                                      return refusal(req, x);      // would miss it)
                                    }
                                  });
}

HttpResponse ModelManager::ollama_load_or_unload(const HttpRequest& req, const Entry& e, double keep_alive) {
  json r = {{"model", e.spec.name},
            {"created_at", ollama_time(std::chrono::system_clock::now())},
            {"done", true},
            {"done_reason", keep_alive == 0 ? "unload" : "load"}};
  if (req.path == "/api/chat")
    r["message"] = {{"role", "assistant"}, {"content", ""}};
  else
    r["response"] = "";
  return json_response(json_text(r));
}

void ModelManager::request_load(Entry& e) {
  e.state = State::Loading;
  e.stage = "waiting for the loader";
  e.refusal.clear();
  jobs_.emplace_back(&e, true);
  wake_.notify_all();
}

void ModelManager::request_unload(Entry& e, const std::string& why) {
  if (e.state != State::Loaded) return;
  e.unload_when_idle = true;
  e.unload_idle = false;
  fmt::print(stderr, "[kestrel] model '{}': unloading ({}){}\n", e.spec.name, why,
             e.in_flight > 0 ? fmt::format(" once its {} requests in flight end", e.in_flight) : "");
  if (e.in_flight == 0 && !e.unload_queued) {
    e.unload_queued = true;
    jobs_.emplace_back(&e, false);
    wake_.notify_all();
  }
}

void ModelManager::release(Entry& e, std::optional<double> keep_alive) {
  std::lock_guard lock(mutex_);
  e.in_flight--;
  e.last_used = Clock::now();
  e.keep_alive = keep_alive;  // (Ollama's: the last request's, or the model's own idle time)
  if (e.in_flight > 0) return;
  if (!e.unload_when_idle && e.keep_alive && *e.keep_alive == 0) {
    e.unload_when_idle = true;
    fmt::print(stderr, "[kestrel] model '{}': unloading (keep_alive 0)\n", e.spec.name);
  }
  if (e.unload_when_idle && !e.unload_queued && !stop_) {
    e.unload_queued = true;
    jobs_.emplace_back(&e, false);
    wake_.notify_all();
  }
}

double ModelManager::idle_limit(const Entry& e) const {
  if (e.spec.pin) return -1;  // (keep_alive 0 still unloads it: release() asks for that)
  if (e.keep_alive) return std::isinf(*e.keep_alive) ? -1 : *e.keep_alive;
  return e.spec.idle_unload_s >= 0 ? e.spec.idle_unload_s : c_.idle_unload_s;
}

void ModelManager::worker() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (jobs_.empty()) {
      wake_.wait_for(lock, std::chrono::milliseconds(250));
      const auto now = Clock::now();
      for (auto& e : entries_) {
        const double idle = idle_limit(*e);
        if (e->state == State::Loaded && e->in_flight == 0 && idle >= 0 && !e->unload_when_idle &&
            std::chrono::duration<double>(now - e->last_used).count() >= idle) {
          request_unload(*e, fmt::format("idle for {:g} s", idle));
          e->unload_idle = true;
        }
      }
      continue;
    }
    auto [e, is_load] = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    if (is_load)
      load(*e);
    else
      unload(*e);
    lock.lock();
  }
}

std::string ModelManager::make_room(Entry& e, std::vector<std::unique_ptr<HostedModel>>& evicted) {
  const int64_t need = file_bytes(e.spec.path) + file_bytes(e.spec.mmproj);
  if (c_.memory_bytes > 0 && need > c_.memory_bytes)
    return fmt::format("cannot load '{}': its files alone ({}) are more than --models-memory ({})", e.spec.name,
                       mib(need), mib(c_.memory_bytes));
  for (;;) {
    int loaded = 0;
    int64_t bytes = 0;
    for (const auto& x : entries_)
      if (x.get() != &e && x->state == State::Loaded) {  // (loads run one at a time: the others queued wait)
        loaded++;
        bytes += x->bytes;
      }
    const bool count_full = c_.models_max > 0 && loaded + 1 > c_.models_max;
    const bool memory_full = c_.memory_bytes > 0 && bytes + need > c_.memory_bytes;
    if (!count_full && !memory_full) return "";
    Entry* victim = nullptr;
    std::vector<std::string> busy, pinned;
    for (const auto& x : entries_) {
      if (x.get() == &e || x->state != State::Loaded) continue;
      if (x->spec.pin) {
        pinned.push_back(x->spec.name);
      } else if (x->in_flight > 0 || !x->waiters.empty()) {
        busy.push_back(x->spec.name);
      } else if (!victim || x->last_used < victim->last_used) {
        victim = x.get();
      }
    }
    if (!victim)
      return fmt::format("cannot load '{}': {} and no loaded model can be unloaded for it (busy: {}; pinned: {}); "
                         "retry when one is idle",
                         e.spec.name,
                         count_full ? fmt::format("{} models are loaded (--models-max {})", loaded, c_.models_max)
                                    : fmt::format("the loaded models take {} of --models-memory {}, it needs ~{}",
                                                  mib(bytes), mib(c_.memory_bytes), mib(need)),
                         busy.empty() ? "none" : fmt::format("{}", fmt::join(busy, ", ")),
                         pinned.empty() ? "none" : fmt::format("{}", fmt::join(pinned, ", ")));
    fmt::print(stderr, "[kestrel] model '{}': unloading (least recently used, to make room for '{}')\n",
               victim->spec.name, e.spec.name);
    victim->state = State::Unloading;
    evicted.push_back(std::move(victim->host));
  }
}

void ModelManager::load(Entry& e) {
  // The files' headers first (a corrupt or cut file fails here, before any other model is unloaded for it).
  std::string failure;
  try {
    GgufFile::open(e.spec.path);
    if (!e.spec.mmproj.empty()) GgufFile::open(e.spec.mmproj);
  } catch (const std::exception& x) {
    failure = x.what();
  }
  std::vector<std::unique_ptr<HostedModel>> evicted;
  std::vector<std::function<void()>> waiters;
  bool refused = false;
  if (failure.empty()) {
    std::lock_guard lock(mutex_);
    if (const std::string why = make_room(e, evicted); !why.empty()) {
      refused = true;
      fmt::print(stderr, "[kestrel] model '{}': {}\n", e.spec.name, why);
      e.state = State::Unloaded;
      e.refusal = why;
      waiters.swap(e.waiters);
    }
  }
  if (!evicted.empty()) {
    evicted.clear();  // (outside the lock: engines stop, memory goes back)
    malloc_trim(0);
    std::lock_guard lock(mutex_);
    for (auto& x : entries_)
      if (x->state == State::Unloading && !x->host) unloaded(*x);
  }
  for (auto& w : waiters) offload_ ? offload_(std::move(w)) : w();
  if (refused) return;

  const auto t0 = Clock::now();
  std::unique_ptr<HostedModel> host;
  if (failure.empty()) try {
      host = loader_(e.spec, *e.metrics, [this, &e](const std::string& stage) {
        std::lock_guard lock(mutex_);
        e.stage = stage;
      });
    } catch (const std::exception& x) {
      failure = x.what();
    } catch (...) {
      failure = "an unknown error while loading";
    }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  {
    std::lock_guard lock(mutex_);
    if (!host) {
      fmt::print(stderr, "[kestrel] model '{}' failed to load: {}\n", e.spec.name, failure);
      e.state = State::Failed;
      e.error = failure;
      std::error_code ec;
      e.failed_mtime = fs::last_write_time(e.spec.path, ec);
      server_metrics_.add("kestrel_model_load_failures_total", 1, e.spec.name);
    } else {
      e.bytes = host->bytes();
      e.host = std::move(host);
      e.state = State::Loaded;
      e.ever_loaded = true;
      e.error.clear();
      e.load_s = seconds;
      e.last_used = Clock::now();
      e.keep_alive.reset();
      e.unload_when_idle = e.unload_queued = e.unload_idle = false;
      e.created = ApiRoutes::unix_seconds();
      if (draining_) e.host->api().set_draining();
      server_metrics_.add("kestrel_model_loads_total", 1, e.spec.name);
      server_metrics_.add("kestrel_model_load_seconds_total", seconds, e.spec.name);
      fmt::print(stderr, "[kestrel] model '{}' loaded in {:.2f} s ({})\n", e.spec.name, seconds, mib(e.bytes));
    }
    update_gauges();
    waiters.swap(e.waiters);
  }
  for (auto& w : waiters) offload_ ? offload_(std::move(w)) : w();
}

void ModelManager::unloaded(Entry& e) {
  e.state = State::Unloaded;
  e.bytes = 0;
  e.unload_when_idle = e.unload_queued = e.unload_idle = false;
  e.keep_alive.reset();
  server_metrics_.add("kestrel_model_unloads_total", 1, e.spec.name);
  update_gauges();
  if (!e.waiters.empty()) request_load(e);  // requests that came while it unloaded
}

void ModelManager::unload(Entry& e) {
  std::unique_ptr<HostedModel> host;
  {
    std::lock_guard lock(mutex_);
    e.unload_queued = false;
    if (e.state != State::Loaded || !e.unload_when_idle) return;
    if (e.in_flight > 0) return;  // (the last one's release queues it again)
    e.state = State::Unloading;
    host = std::move(e.host);
  }
  const int64_t rss0 = resident_bytes();
  host.reset();
  malloc_trim(0);
  const int64_t freed = rss0 - resident_bytes();
  std::lock_guard lock(mutex_);
  fmt::print(stderr, "[kestrel] model '{}' unloaded ({} freed)\n", e.spec.name, mib(freed));
  unloaded(e);
}

void ModelManager::update_gauges() {
  int loaded = 0;
  int64_t bytes = 0;
  for (const auto& e : entries_)
    if (e->state == State::Loaded) {
      loaded++;
      bytes += e->bytes;
    }
  server_metrics_.set("kestrel_models_loaded", loaded);
  server_metrics_.set("kestrel_models_loaded_bytes", static_cast<double>(bytes));
}

json ModelManager::card(const Entry& e) const {
  json status = {{"value", state_name(e.state)}};
  if (e.state == State::Failed) {
    status["failed"] = true;
    status["error"] = e.error;
  }
  if (e.state == State::Loading) status["stage"] = e.stage;
  if (!e.refusal.empty() && e.state == State::Unloaded) status["refusal"] = e.refusal;
  json modalities = {"text"};
  if (!e.spec.mmproj.empty()) modalities.push_back("image");
  json c = {{"id", e.spec.name},
            {"aliases", e.spec.aliases},
            {"object", "model"},
            {"created", e.created},
            {"owned_by", "kestrel"},
            {"status", status},
            {"source", e.spec.source},
            {"path", e.spec.path},
            {"pinned", e.spec.pin},
            {"architecture", {{"input_modalities", modalities}, {"output_modalities", {"text"}}}}};
  if (e.state == State::Loaded) {
    c["max_model_len"] = e.host->engine().n_ctx();
    c["size"] = e.bytes;
    c["load_seconds"] = e.load_s;
    c["requests_in_flight"] = e.in_flight;
  }
  return c;
}

HttpResponse ModelManager::list_models() const {
  std::lock_guard lock(mutex_);
  json data = json::array();
  for (const auto& e : entries_) data.push_back(card(*e));
  return json_response(json_text({{"object", "list"}, {"data", data}}));
}

HttpResponse ModelManager::model_card(const HttpRequest& req) const {
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  std::lock_guard lock(mutex_);
  if (const Entry* e = find(id)) return json_response(json_text(card(*e)));
  std::vector<std::string> names;
  for (const auto& x : entries_) names.push_back(x->spec.name);
  return error_response({404, model_not_found_message(id, names), "model", "invalid_request_error", "model_not_found"});
}

ModelManager::Entry* ModelManager::named_in_body(const HttpRequest& req) {
  const auto body = parse_body(req.body);
  if (!body.is_object() || !body.contains("model") || !body["model"].is_string())
    throw bad_request("model", "'model' (a string) is required");
  Entry* e = find(body["model"].get<std::string>());
  if (!e) throw ApiError{404, "model is not found", "model", "invalid_request_error", "model_not_found"};
  return e;
}

HttpResponse ModelManager::load_request(const HttpRequest& req) {
  try {
    std::unique_lock lock(mutex_);
    Entry* e = named_in_body(req);
    if (e->state == State::Loaded || e->state == State::Loading)
      throw ApiError{400, fmt::format("model '{}' is already running", e->spec.name), "model", "invalid_request_error",
                     "model_running"};
    request_load(*e);
    // Answered when the load ends: success, or the reason it failed.
    return OffloadedResponse::start([e](std::function<void()> task) { e->waiters.push_back(std::move(task)); },
                                    [this, e] {
                                      std::lock_guard l(mutex_);
                                      if (e->state == State::Loaded) return json_response(json_text({{"success", true}}));
                                      const bool failed = e->state == State::Failed;
                                      return error_response(
                                          {failed ? 500 : 503,
                                           failed ? fmt::format("model '{}' failed to load: {}", e->spec.name, e->error)
                                                  : e->refusal,
                                           "model", "server_error", failed ? "model_load_failed" : "model_unavailable"});
                                    });
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

HttpResponse ModelManager::unload_request(const HttpRequest& req) {
  try {
    std::lock_guard lock(mutex_);
    Entry* e = named_in_body(req);
    if (e->state != State::Loaded)
      throw ApiError{400, fmt::format("model '{}' is not running ({})", e->spec.name, state_name(e->state)), "model",
                     "invalid_request_error", "model_not_running"};
    request_unload(*e, "POST /models/unload");
    return json_response(json_text({{"success", true}, {"requests_in_flight", e->in_flight}}));
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

HttpResponse ModelManager::ollama_tags(bool running) const {
  std::lock_guard lock(mutex_);
  json models = json::array();
  const auto now = Clock::now();
  for (const auto& e : entries_) {
    if (running && e->state != State::Loaded) continue;
    const std::string tagged = e->spec.name.find(':') == std::string::npos ? e->spec.name + ":latest" : e->spec.name;
    std::error_code ec;
    const auto mtime = fs::last_write_time(e->spec.path, ec);
    const auto modified = ec ? std::chrono::system_clock::now()
                             : std::chrono::file_clock::to_sys(mtime);
    json details = e->host ? e->host->api().ollama_details() : json{{"format", "gguf"}};
    json m = {{"name", tagged},
              {"model", tagged},
              {"modified_at", ollama_time(std::chrono::time_point_cast<std::chrono::system_clock::duration>(modified))},
              {"size", running ? e->bytes : file_bytes(e->spec.path) + file_bytes(e->spec.mmproj)},
              {"digest", fmt::format("{:016x}", std::hash<std::string>{}(e->spec.path))},
              {"details", details}};
    if (running) {
      const double idle = idle_limit(*e);
      std::string expires = "2318-01-01T00:00:00Z";  // (Ollama's "never")
      if (idle >= 0) {
        const double left = e->in_flight > 0 ? idle : idle - std::chrono::duration<double>(now - e->last_used).count();
        const auto at = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, left)));
        expires = ollama_time(at);
      }
      m["expires_at"] = expires;
      m["size_vram"] = 0;  // (the CPU's memory)
      m["context_length"] = e->host->engine().n_ctx();
    }
    models.push_back(std::move(m));
  }
  return json_response(json_text({{"models", models}}));
}

HttpResponse ModelManager::stored_response(const HttpRequest& req) {
  std::vector<std::pair<HostedModel*, std::shared_ptr<Lease>>> loaded;
  {
    std::lock_guard lock(mutex_);
    for (auto& e : entries_)
      if (e->state == State::Loaded) {
        e->in_flight++;
        loaded.emplace_back(e->host.get(), std::make_shared<Lease>(this, e.get(), std::nullopt));
      }
  }
  for (auto& [host, lease] : loaded) {
    HttpResponse r = host->routes().handle(req);
    if (r.status != 404) return r;
  }
  const std::string id = req.path.substr(std::string("/v1/responses/").size());
  return error_response({404, fmt::format("no loaded model keeps a response '{}'", id), "response_id",
                         "invalid_request_error", "not_found"});
}

HttpResponse ModelManager::props(const HttpRequest& req) {
  if (!req.query_param("model").empty()) return dispatch(req);
  std::lock_guard lock(mutex_);
  int loaded = 0;
  for (const auto& e : entries_) loaded += e->state == State::Loaded;
  return json_response(json_text({{"role", "router"},
                                  {"max_instances", c_.models_max},
                                  {"models_autoload", c_.autoload},
                                  {"models", entries_.size()},
                                  {"models_loaded", loaded}}));
}

HttpResponse ModelManager::metrics() const {
  std::vector<const ServerMetrics*> models;
  {
    std::lock_guard lock(mutex_);
    for (const auto& e : entries_) {
      if (e->host) e->host->api().refresh_metrics();
      if (e->ever_loaded || e->host) models.push_back(e->metrics.get());
    }
  }
  HttpResponse r = json_response(server_metrics_.render_with(models));
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

}  // namespace kestrel
