#include "hw/topology.h"

#include <hwloc.h>
#include <unistd.h>

namespace kestrel {
namespace {

Topology probe_topology() {
  Topology t;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return t;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return t;
  }
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.threads = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  t.numa_nodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  const hwloc_obj_type_t kinds[] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L1ICACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE};
  for (hwloc_obj_type_t k : kinds) {
    const int n = hwloc_get_nbobjs_by_type(topo, k);
    if (n <= 0) continue;
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, k, 0);
    CacheLevel c;
    c.level = static_cast<int>(o->attr->cache.depth);
    c.kind = o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION ? "instruction"
             : o->attr->cache.type == HWLOC_OBJ_CACHE_DATA      ? "data"
                                                                 : "unified";
    c.size_bytes = static_cast<int64_t>(o->attr->cache.size);
    c.line_bytes = static_cast<int>(o->attr->cache.linesize);
    c.instances = n;
    t.caches.push_back(c);
  }
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  t.memory_bytes = static_cast<int64_t>(root->total_memory);
  hwloc_topology_destroy(topo);
  if (t.threads <= 0) t.threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (t.cores <= 0) t.cores = t.threads;
  return t;
}

int64_t cache_size(const Topology& t, int level, bool data) {
  for (const auto& c : t.caches)
    if (c.level == level && (!data || c.kind != "instruction")) return c.size_bytes;
  return 0;
}

}  // namespace

int64_t Topology::l1d_bytes() const { return cache_size(*this, 1, true); }
int64_t Topology::l2_bytes() const { return cache_size(*this, 2, true); }
int64_t Topology::l3_bytes() const { return cache_size(*this, 3, true); }

const Topology& topology() {
  static const Topology t = probe_topology();
  return t;
}

}  // namespace kestrel
