/* src/introspect.c -- the statistics and options API (kite_stats_*, kite_option_*), and
 * kite_check (every validator).
 * Layer: top (beside alloc/free). Nothing here allocates: text goes through message.h's
 * formatter. What each figure counts is said in the text output itself and in
 * docs/stats.md, which also gives the JSON schema.
 */
#include <kite.h>
#include "heap.h"
#include "huge.h"
#include "arena.h"
#include "options.h"
#include "purger.h"
#include "stats.h"
#include "message.h"
#include "visit.h"
#include "guarded.h"

/* Everything the printers report, taken once (counters merged, live figures walked). */
typedef struct {
  kite_gstats_t s;
  kite_live_t l;
  uint64_t issued; /* blocks put on allocation lists, all classes */
} snapshot_t;

static uint64_t issued_total(const kite_gstats_t *s) {
  uint64_t n = 0;
  for (unsigned c = 0; c < KITE_CLASSES; c++) n += s->issued[c];
  return n;
}

static void snapshot(snapshot_t *sn) {
  _kite_heap_collect_stats(&sn->s);
  _kite_live_collect(&sn->l);
  sn->issued = issued_total(&sn->s);
}

static void out_kv(kite_out_t *o, const char *label, uint64_t v) {
  _kite_out_str(o, label);
  _kite_out_u64(o, v);
}

/* ---- text ---- */

typedef struct { kite_out_t *o; unsigned n; } heap_lines_t;

static void text_heap(kite_heap_t *h, void *arg) {
  heap_lines_t *hl = arg;
  kite_heap_live_t hv;
  _kite_heap_live(h, &hv);
  _kite_out_str(hl->o, "  heap ");
  _kite_out_u64(hl->o, ++hl->n);
  _kite_out_str(hl->o, h->user ? " (first-class): " : " (thread): ");
  out_kv(hl->o, "live blocks ", hv.live_blocks);
  out_kv(hl->o, ", pages ", hv.pages);
  out_kv(hl->o, ", remote frees ", h->remote_frees);
  _kite_out_str(hl->o, "\n");
}

KITE_API void kite_stats_print(int fd) {
  snapshot_t sn;
  snapshot(&sn);
  kite_gstats_t *s = &sn.s;
  kite_live_t *l = &sn.l;
  kite_out_t o = {.len = 0, .fd = fd};
  uint64_t issued = sn.issued;
  _kite_out_str(&o, "kite statistics\n");
  _kite_out_str(&o, "  committed: "); _kite_out_bytes(&o, s->committed);
  _kite_out_str(&o, " (memory kite holds from the OS now), peak committed: "); _kite_out_bytes(&o, s->peak_committed);
  _kite_out_str(&o, ", purged: "); _kite_out_bytes(&o, s->purged);
  _kite_out_str(&o, " (given back so far)\n");
  out_kv(&o, "  arenas: ", s->arenas);
  _kite_out_str(&o, " (mapped now, up to 64 MiB each)\n");
  out_kv(&o, "  live: ", l->small_blocks + l->large_blocks + l->huge_blocks);
  _kite_out_str(&o, " blocks, "); _kite_out_bytes(&o, l->small_bytes + l->large_bytes + l->huge_bytes);
  _kite_out_str(&o, " (blocks handed out and not freed, at their usable sizes)\n");
  out_kv(&o, "    small: ", l->small_blocks);
  _kite_out_str(&o, " blocks, "); _kite_out_bytes(&o, l->small_bytes);
  out_kv(&o, " in ", l->small_pages);
  _kite_out_str(&o, " pages\n");
  out_kv(&o, "    large: ", l->large_blocks);
  _kite_out_str(&o, " blocks, "); _kite_out_bytes(&o, l->large_bytes);
  _kite_out_str(&o, "\n");
  out_kv(&o, "    huge: ", l->huge_blocks);
  _kite_out_str(&o, " blocks, "); _kite_out_bytes(&o, l->huge_bytes);
  _kite_out_str(&o, "\n");
  _kite_out_str(&o, "  class      size  live blocks   live bytes   pages       issued\n");
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!s->issued[c] && !l->pages[c]) continue;
    _kite_out_str(&o, "  ");
    _kite_out_u64w(&o, c, 5);
    _kite_out_u64w(&o, _kite_class_size_[c], 10);
    _kite_out_u64w(&o, l->blocks[c], 13);
    _kite_out_u64w(&o, l->bytes[c], 13);
    _kite_out_u64w(&o, l->pages[c], 8);
    _kite_out_u64w(&o, s->issued[c], 13);
    _kite_out_str(&o, "\n");
  }
  out_kv(&o, "  small allocations: ", issued);
  _kite_out_str(&o, " (column issued: blocks put on a heap's allocation list, carved from a page\n"
                    "    or collected from remote frees and, while statistics are on, local frees;\n"
                    "    not malloc calls)\n");
  out_kv(&o, "  large allocations: ", s->large_allocs);
  out_kv(&o, ", huge allocations: ", s->huge_allocs);
  _kite_out_str(&o, " (calls since start)\n");
  out_kv(&o, "  remote frees: ", s->remote_frees);
  _kite_out_str(&o, " (frees of small blocks owned by another thread's heap)\n");
  out_kv(&o, "  invalid frees: ", s->invalid_frees);
  _kite_out_str(&o, " (invalid pointers and double frees reported)\n");
  out_kv(&o, "  pages abandoned: ", s->pages_abandoned);
  out_kv(&o, ", adopted: ", s->pages_adopted);
  _kite_out_str(&o, " (pages of exited threads, and those taken over)\n");
  heap_lines_t hl = {&o, 0};
  _kite_heap_foreach(text_heap, &hl);
  _kite_out_flush(&o);
}

/* ---- JSON (schema: docs/stats.md; bump "schema" on any incompatible change) ---- */

static void jkv(kite_out_t *o, const char *key, uint64_t v, bool comma) {
  _kite_out_str(o, "\"");
  _kite_out_str(o, key);
  _kite_out_str(o, "\": ");
  _kite_out_u64(o, v);
  if (comma) _kite_out_str(o, ", ");
}

typedef struct { kite_out_t *o; unsigned n; } heap_json_t;

static void json_heap(kite_heap_t *h, void *arg) {
  heap_json_t *hj = arg;
  kite_heap_live_t hv;
  _kite_heap_live(h, &hv);
  _kite_out_str(hj->o, hj->n ? ",\n    {" : "\n    {");
  jkv(hj->o, "heap", ++hj->n, true);
  _kite_out_str(hj->o, h->user ? "\"kind\": \"first-class\", " : "\"kind\": \"thread\", ");
  jkv(hj->o, "live_blocks", hv.live_blocks, true);
  jkv(hj->o, "pages", hv.pages, true);
  jkv(hj->o, "remote_frees", h->remote_frees, false);
  _kite_out_str(hj->o, "}");
}

KITE_API void kite_stats_print_json(int fd) {
  snapshot_t sn;
  snapshot(&sn);
  kite_gstats_t *s = &sn.s;
  kite_live_t *l = &sn.l;
  kite_out_t o = {.len = 0, .fd = fd};
  uint64_t issued = sn.issued;
  _kite_out_str(&o, "{\"schema\": 1, \"version\": \"");
  _kite_out_str(&o, kite_version());
  _kite_out_str(&o, "\",\n  ");
  jkv(&o, "committed", s->committed, true);
  jkv(&o, "peak_committed", s->peak_committed, true);
  jkv(&o, "purged", s->purged, true);
  jkv(&o, "arenas", s->arenas, false);
  _kite_out_str(&o, ",\n  \"live\": {");
  jkv(&o, "blocks", l->small_blocks + l->large_blocks + l->huge_blocks, true);
  jkv(&o, "bytes", l->small_bytes + l->large_bytes + l->huge_bytes, false);
  _kite_out_str(&o, "},\n  \"small\": {");
  jkv(&o, "live_blocks", l->small_blocks, true);
  jkv(&o, "live_bytes", l->small_bytes, true);
  jkv(&o, "pages", l->small_pages, true);
  jkv(&o, "issued", issued, false);
  _kite_out_str(&o, ", \"classes\": [");
  bool first = true;
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!s->issued[c] && !l->pages[c]) continue;
    _kite_out_str(&o, first ? "\n    {" : ",\n    {");
    first = false;
    jkv(&o, "class", c, true);
    jkv(&o, "size", _kite_class_size_[c], true);
    jkv(&o, "live_blocks", l->blocks[c], true);
    jkv(&o, "live_bytes", l->bytes[c], true);
    jkv(&o, "pages", l->pages[c], true);
    jkv(&o, "issued", s->issued[c], false);
    _kite_out_str(&o, "}");
  }
  _kite_out_str(&o, "]},\n  \"large\": {");
  jkv(&o, "allocs", s->large_allocs, true);
  jkv(&o, "live_blocks", l->large_blocks, true);
  jkv(&o, "live_bytes", l->large_bytes, false);
  _kite_out_str(&o, "},\n  \"huge\": {");
  jkv(&o, "allocs", s->huge_allocs, true);
  jkv(&o, "live_blocks", l->huge_blocks, true);
  jkv(&o, "live_bytes", l->huge_bytes, false);
  _kite_out_str(&o, "},\n  ");
  jkv(&o, "remote_frees", s->remote_frees, true);
  jkv(&o, "invalid_frees", s->invalid_frees, true);
  jkv(&o, "pages_abandoned", s->pages_abandoned, true);
  jkv(&o, "pages_adopted", s->pages_adopted, false);
  _kite_out_str(&o, ",\n  \"threads\": [");
  heap_json_t hj = {&o, 0};
  _kite_heap_foreach(json_heap, &hj);
  _kite_out_str(&o, "]}\n");
  _kite_out_flush(&o);
}

KITE_API void kite_stats_get(kite_stats_t *out) {
  kite_gstats_t s;
  _kite_heap_collect_stats(&s);
  out->small_allocs = issued_total(&s);
  out->large_allocs = s.large_allocs;
  out->huge_allocs = s.huge_allocs;
  out->remote_frees = s.remote_frees;
  out->invalid_frees = s.invalid_frees;
  out->committed = s.committed;
  out->peak_committed = s.peak_committed;
  out->purged = s.purged;
  out->arenas = s.arenas;
}

KITE_API long kite_option_get(kite_option_t option) {
  _kite_options_ensure();
  switch (option) {
  case KITE_OPTION_SHOW_STATS: return _kite_options.show_stats;
  case KITE_OPTION_VERBOSE: return _kite_options.verbose;
  case KITE_OPTION_ABORT_ON_ERROR: return _kite_options.abort_on_error;
  case KITE_OPTION_PURGE_DELAY_MS: return (long)_kite_options.purge_delay_ms;
  case KITE_OPTION_HUGEPAGES: return _kite_options.hugepages;
  case KITE_OPTION_BACKGROUND: return _kite_options.background;
  case KITE_OPTION_GUARDED_SAMPLE: return (long)_kite_options.guarded_sample;
  }
  return -1;
}

KITE_API void kite_option_set(kite_option_t option, long value) {
  _kite_options_ensure();
  switch (option) {
  case KITE_OPTION_SHOW_STATS: _kite_options.show_stats = value == 2 ? 2 : value != 0; break;
  case KITE_OPTION_VERBOSE: _kite_options.verbose = value != 0; break;
  case KITE_OPTION_ABORT_ON_ERROR: _kite_options.abort_on_error = value != 0; break;
  case KITE_OPTION_PURGE_DELAY_MS: _kite_options.purge_delay_ms = value; break;
  case KITE_OPTION_HUGEPAGES: _kite_options.hugepages = value == 2 || value == 3 ? (uint8_t)value : value != 0; break;
  case KITE_OPTION_BACKGROUND:
    _kite_options.background = value != 0;
    _kite_purger_enable(value != 0);
    break;
  case KITE_OPTION_GUARDED_SAMPLE:
    __atomic_store_n(&_kite_options.guarded_sample, value < 0 ? 0 : value > INT32_MAX ? INT32_MAX : value, __ATOMIC_RELAXED);
    __atomic_store_n(&_kite_small_route, _kite_small_route_for(_kite_options.guarded_sample), __ATOMIC_RELAXED);
    break;
  }
}

/* Every validator, each under the lock that guards its structure (heap_lock, the huge cache
 * lock, the arena lock, one at a time): the size-class tables, the calling thread's heap and
 * every page in it (with their free lists), the abandoned pages, the huge cache, every arena
 * (buddy heap, units, descriptors of free units) and the page map. Other threads' heaps
 * and pages are not read beyond what the arena lock guards. (The name in parentheses: the
 * message.h assertion macro kite_check(e) must not expand here.) */
KITE_API int (kite_check)(void) {
  bool ok = _kite_sizeclass_check();
  ok = _kite_heap_check_all() && ok;
  ok = _kite_huge_check() && ok;
  ok = _kite_arena_check() && ok;
  ok = _kite_guarded_check() && ok; /* guarded.h */
  return ok;
}
