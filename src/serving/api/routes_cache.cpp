// GET /cache: the prefix cache, tier by tier (the KV pool, RAM, disk): entries, bytes, limits, hit rates.
// POST /slots/N?action=save|restore|erase: llama-server's slot actions, mapped onto the prefix cache.
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kv/prefix_snapshot.h"

#include "serving/api/api_routes.h"
#include "serving/api/openai_api.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

json tier_json(const PrefixTiers::TierStats& t, bool on) {
  const int64_t lookups = t.hits + t.misses;
  return {{"enabled", on},
          {"entries", t.entries},
          {"bytes", t.bytes},
          {"limit_bytes", t.limit},
          {"hits", t.hits},
          {"misses", t.misses},
          {"hit_rate", lookups > 0 ? static_cast<double>(t.hits) / static_cast<double>(lookups) : 0.0},
          {"promotions", t.promotions},
          {"evictions", t.evictions},
          {"writes", t.writes},
          {"corrupt", t.corrupt},
          {"dropped", t.dropped},
          {"load_ms", t.load_ms}};
}

}  // namespace

HttpResponse ApiRoutes::cache_summary() const {
  const PoolView p = engine_.pool_view();
  json out;
  out["block_tokens"] = p.block_size;
  out["pool"] = {{"blocks", p.blocks},
                 {"used_blocks", p.used},
                 {"cached_blocks", p.cached},
                 {"bytes", p.bytes},
                 {"queried_tokens", p.queried_tokens},
                 {"hit_tokens", p.hit_tokens},
                 {"tier_hit_tokens", p.tier_hit_tokens},
                 {"hit_rate", p.queried_tokens > 0 ? static_cast<double>(p.hit_tokens) / static_cast<double>(p.queried_tokens) : 0.0}};
  if (const PrefixTiers* t = engine_.tiers()) {
    const PrefixTiers::Stats s = t->stats(true);
    out["ram"] = tier_json(s.ram, t->has_ram());
    out["ram"]["pinned_entries"] = s.pinned_entries;
    out["ram"]["pinned_bytes"] = s.pinned_bytes;
    out["disk"] = tier_json(s.disk, s.disk_on);
    out["disk"]["folder"] = t->folder();
    if (!s.disk_error.empty()) out["disk"]["error"] = s.disk_error;
  } else {
    out["ram"] = tier_json({}, false);
    out["disk"] = tier_json({}, false);
  }
  return json_response(json_text(out));
}

namespace {

// llama.cpp's fs_validate_filename, in short: a plain file name (no folders, no "." or "..", no control
// characters), at most 255 bytes.
bool valid_filename(const std::string& f) {
  if (f.empty() || f.size() > 255 || f == "." || f == "..") return false;
  for (const unsigned char c : f)
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == ':') return false;
  return true;
}

}  // namespace

// A slot is what the last request served in it held (ServingEngine's slot table); save writes the rows of its
// tokens' cached prefix to a file under --slot-save-path, restore offers a file's rows to the RAM tier (so the
// next prompt starting with those tokens finds them) and sets the slot's tokens, erase forgets the slot's tokens
// (the cache's entries stay: other prompts may share them). The answers have llama-server's shapes.
HttpResponse ApiRoutes::slot_action(const HttpRequest& r) {
  try {
    return slot_action_checked(r);
  } catch (const ApiError& e) {
    return error_response(e);
  }
}

HttpResponse ApiRoutes::slot_action_checked(const HttpRequest& r) {
  if (c_.slot_save_path.empty())
    return error_response({501, "This server does not support slots action. Start it with `--slot-save-path`", "",
                           "not_supported_error", ""});
  const std::string id_text = r.path.substr(r.path.rfind('/') + 1);
  int id = -1;
  try {
    size_t used = 0;
    id = std::stoi(id_text, &used);
    if (used != id_text.size()) id = -1;
  } catch (const std::exception&) {
  }
  if (id < 0 || id >= c_.n_slots)
    return error_response(bad_request("id_slot", fmt::format("Invalid slot ID '{}' (slots 0 to {})", id_text, c_.n_slots - 1)));
  const std::string action = r.query_param("action");
  if (action == "erase") {
    int64_t erased = 0;
    engine_.between_steps([&](LoadedModel&, std::vector<SlotRecord>& slots) {
      erased = static_cast<int64_t>(slots[static_cast<size_t>(id)].tokens.size());
      slots[static_cast<size_t>(id)].tokens.clear();
    });
    return json_response(json_text({{"id_slot", id}, {"n_erased", erased}}));
  }
  if (action != "save" && action != "restore")
    return error_response(bad_request("action", "Invalid action: '?action=' must be save, restore or erase"));
  const nlohmann::ordered_json body = parse_body(r.body);
  if (!body.is_object() || !body.contains("filename") || !body["filename"].is_string())
    return error_response(bad_request("filename", "'filename' (a string) is missing"));
  check_known_fields(body, "", {"filename"});
  const std::string filename = body["filename"];
  if (!valid_filename(filename)) return error_response(bad_request("filename", "Invalid filename"));
  const std::string path = (std::filesystem::path(c_.slot_save_path) / filename).string();
  const auto t0 = std::chrono::steady_clock::now();
  auto ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  if (action == "save") {
    PrefixSnapshot snap;
    engine_.between_steps([&](LoadedModel& e, std::vector<SlotRecord>& slots) {
      snap = collect_prefix(*e.kv, slots[static_cast<size_t>(id)].tokens);
    });
    const std::string bytes = encode_snapshot(snap, c_.slot_identity);
    // Written beside it under a short temporary name, then renamed: a reader never sees half a file.
    static std::atomic<int64_t> writes{0};
    const std::string tmp =
        (std::filesystem::path(c_.slot_save_path) / fmt::format(".tmp-slot-{}-{}", getpid(), writes++)).string();
    std::error_code ec;
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out.flush()) ec = std::make_error_code(std::errc::io_error);
    }
    if (!ec) std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      return error_response({500, fmt::format("cannot write {}: {}", path, ec.message()), "filename", "server_error", ""});
    }
    return json_response(json_text({{"id_slot", id},
                                    {"filename", filename},
                                    {"n_saved", snap.tokens.size()},
                                    {"n_written", bytes.size()},
                                    {"n_cached", snap.covered},
                                    {"timings", {{"save_ms", ms()}}}}));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return error_response({404, fmt::format("no slot file '{}' under --slot-save-path", filename), "filename", "not_found_error", ""});
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PrefixSnapshot snap;
  try {
    snap = decode_snapshot(bytes, c_.slot_identity, engine_.engine().kv->store());
  } catch (const Error& e) {
    return error_response(bad_request("filename", fmt::format("'{}': {}", filename, e.what())));
  }
  const PrefixTiers* tiers = engine_.tiers();
  if (!snap.entries.empty() && !(tiers && tiers->has_ram()))
    return error_response(bad_request("", "restoring a slot needs the prefix cache's RAM tier (--cache-ram above 0)"));
  engine_.between_steps([&](LoadedModel& e, std::vector<SlotRecord>& slots) {
    offer_prefix(*e.kv, snap);
    slots[static_cast<size_t>(id)].tokens = snap.tokens;
  });
  return json_response(json_text({{"id_slot", id},
                                  {"filename", filename},
                                  {"n_restored", snap.tokens.size()},
                                  {"n_read", bytes.size()},
                                  {"n_cached", snap.covered},
                                  {"timings", {{"restore_ms", ms()}}}}));
}

}  // namespace kestrel
