#pragma once
// Several models behind one server (serve --models-dir / --models-preset): each loaded model is a whole serving
// stack of its own (its engine thread, KV pool, API routes: HostedModel, built by the command line's loader) in
// this one process; the manager routes every request by the model it names, loads on first use, unloads the
// least recently used idle model when --models-max or --models-memory says there is no room, unloads idle models
// after their time (--idle-unload, Ollama's keep_alive), and answers the endpoints about models itself:
//   GET  /v1/models, /models, /v1/models/{id}   every model, loaded or not, with its state (llama-server's
//                                               `status` object)
//   POST /models/load, /models/unload           llama-server's router endpoints ({"model": name})
//   GET  /api/tags, /api/ps                     Ollama's listings (/api/ps: the loaded ones, sizes, expiry)
//   GET  /metrics                               the transport's and manager's series, then each model's
//   GET  /props                                 without ?model=, the router's own (role, max instances)
// Every other route goes to the model the request names: a POST's JSON `model` (Ollama's /api/show: `name`
// too; else ?model=, for the bodies that cannot name one), a GET's ?model=; GET /v1/responses/{id} asks each loaded model. A load runs on the manager's own thread,
// one at a time; the requests waiting for it are answered when it ends. A model that fails to load (a corrupt
// file) is marked failed with the reason, its requests get that reason, and nothing else is touched.
// docs/serving.md ("Many models") says why one process and what it costs.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serving/api/api_routes.h"
#include "serving/engine/metrics.h"
#include "serving/http/offload.h"
#include "serving/http/router.h"
#include "serving/models/model_catalog.h"

namespace kestrel {

// One loaded model's serving stack, built by the loader and owned by the manager until unloaded. Destroying it
// stops its engine (requests still in it are cancelled: the manager only unloads a model with none in flight)
// and frees its weights, KV pool and projector.
class HostedModel {
 public:
  virtual ~HostedModel() = default;
  virtual ApiRoutes& api() = 0;             // its endpoints (installed in routes())
  virtual const Router& routes() const = 0;
  virtual ServingEngine& engine() = 0;
  virtual int64_t bytes() const = 0;        // memory it holds: weights, KV pool, projector
};

struct ModelManagerConfig {
  int models_max = 4;         // models loaded at once (0: no limit); llama-server's --models-max default
  int64_t memory_bytes = 0;   // the loaded models' bytes at most (0: no limit)
  bool autoload = true;       // load a model a request names (else: 400 until POST /models/load)
  double idle_unload_s = -1;  // unload a model idle this long (< 0: never; a model's own ModelSpec value first)
};

// Builds a model's stack (throws Error for a model that cannot load); `stage` reports its progress.
using ModelLoader = std::function<std::unique_ptr<HostedModel>(const ModelSpec& spec, ServerMetrics& metrics,
                                                               const std::function<void(const std::string&)>& stage)>;

class ModelManager {
 public:
  // server_metrics: the transport's (the manager's series go there too). Throws Error for two models of one name.
  ModelManager(std::vector<ModelSpec> models, ModelManagerConfig config, ModelLoader loader,
               ServerMetrics& server_metrics);
  ~ModelManager();  // unloads every model

  void set_offload(Offload offload) { offload_ = std::move(offload); }
  void install(Router& router);
  // Starts the manager's thread and loads the load-on-startup models (in the background).
  void start();
  // New requests get 503; each loaded model stops taking them.
  void set_draining();
  // Lets each loaded model's requests finish until the deadline (then cancels them) and stops its engine.
  void shutdown(int deadline_ms);

  std::vector<std::string> names() const;  // the models' names, in their order

  enum class State { Unloaded, Loading, Loaded, Unloading, Failed };
  static const char* state_name(State s);

 private:
  struct Entry;
  struct Lease;
  using Clock = std::chrono::steady_clock;

  // What a request asks of the manager: its model, Ollama's keep_alive (seconds; infinity: never unload), and
  // whether it is Ollama's load-only form (a /api/generate without a prompt, a /api/chat without messages).
  struct Target {
    std::string name;
    std::optional<double> keep_alive;
    bool load_only = false;
  };
  HttpResponse dispatch(const HttpRequest& req);
  // after_load: the request waited for a load that has ended (it does not start another).
  HttpResponse route(const HttpRequest& req, const Target& t, bool autoload, bool after_load);
  static HttpResponse ollama_load_or_unload(const HttpRequest& req, const Entry& e, double keep_alive);
  HttpResponse list_models() const;
  HttpResponse model_card(const HttpRequest& req) const;
  HttpResponse load_request(const HttpRequest& req);
  HttpResponse unload_request(const HttpRequest& req);
  HttpResponse ollama_tags(bool running) const;
  HttpResponse stored_response(const HttpRequest& req);
  HttpResponse props(const HttpRequest& req);
  HttpResponse metrics() const;
  nlohmann::json card(const Entry& e) const;  // (lock held)
  Entry* find(const std::string& name);       // by name, alias or Ollama's name:latest (lock held)
  Entry* named_in_body(const HttpRequest& req);  // the body's {"model": name} (lock held; throws ApiError)
  const Entry* find(const std::string& name) const;

  // (lock held) Queues a load of e unless one is under way; its requests wait in e.waiters.
  void request_load(Entry& e);
  // (lock held) Queues e's unload; a model with requests in flight unloads when the last one ends.
  void request_unload(Entry& e, const std::string& why);
  void release(Entry& e, std::optional<double> keep_alive);  // a request done (Lease)
  void worker();                                             // the manager's thread: loads, unloads, idle checks
  void load(Entry& e);
  void unload(Entry& e);
  void unloaded(Entry& e);  // (lock held) its host gone: the state, metrics, and a reload for waiting requests
  // (lock held) Evicts least recently used idle unpinned models until `e` fits; "" or why it cannot.
  std::string make_room(Entry& e, std::vector<std::unique_ptr<HostedModel>>& evicted);
  double idle_limit(const Entry& e) const;
  void update_gauges();  // (lock held)

  ModelManagerConfig c_;
  ModelLoader loader_;
  ServerMetrics& server_metrics_;
  Offload offload_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::deque<std::pair<Entry*, bool>> jobs_;  // (model, load?) for the manager's thread
  bool stop_ = false, draining_ = false;
  std::thread thread_;
};

}  // namespace kestrel
