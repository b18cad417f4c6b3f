// GET /cache: the prefix cache, tier by tier (the KV pool, RAM, disk): entries, bytes, limits, hit rates.
#include <nlohmann/json.hpp>

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
    const PrefixTiers::Stats s = t->stats();
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

}  // namespace kestrel
