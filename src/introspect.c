/* src/introspect.c -- the statistics and options API (kite_stats_*, kite_option_*), and
 * kite_check (every validator).
 * Layer: top (beside alloc/free). Nothing here allocates: text goes through message.h's
 * formatter. What each figure counts is said in the text output itself and in
 * docs/stats.md, which also gives the JSON schema.
 */
#define _GNU_SOURCE
#include <kite.h>
#include "heap.h"
#include "huge.h"
#include "arena.h"
#include "options.h"
#include "purger.h"
#include "stats.h"
#include "message.h"
#include "visit.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#include "guarded.h"
#include "prof.h"

/* Who printed: the pid and the program's name (glibc's program_invocation_short_name: set
 * before main, no allocation). The name is printed with '?' for anything JSON or a terminal
 * would take as markup (quotes, backslashes, control characters), cut at 64 characters. */
static void out_program(kite_out_t *o) {
  char name[72];
  const char *p = program_invocation_short_name ? program_invocation_short_name : "";
  size_t i = 0;
  for (; p[i] && i < 64; i++) name[i] = (p[i] < 32 || p[i] == 127 || p[i] == '"' || p[i] == '\\') ? '?' : p[i];
  name[i] = 0;
  _kite_out_str(o, name);
}

static void out_value(kite_out_t *o, const kite_stat_field_t *f, uint64_t v) {
  if (f->bytes) _kite_out_bytes(o, v);
  else _kite_out_u64(o, v);
}

/* ---- text: one line per field of the table (label, value, what it counts), the size
 * classes, one line per heap ---- */

typedef struct { kite_out_t *o; unsigned n; } heap_lines_t;

static void text_heap(kite_heap_t *h, void *arg) {
  heap_lines_t *hl = arg;
  kite_heap_live_t hv;
  _kite_heap_live(h, &hv);
  _kite_out_str(hl->o, "  heap ");
  _kite_out_u64(hl->o, ++hl->n);
  _kite_out_str(hl->o, h->user ? " (first-class): " : " (thread): ");
  _kite_out_str(hl->o, "live blocks "); _kite_out_u64(hl->o, hv.live_blocks);
  _kite_out_str(hl->o, ", pages "); _kite_out_u64(hl->o, hv.pages);
  _kite_out_str(hl->o, ", remote frees "); _kite_out_u64(hl->o, hv.remote_frees);
  _kite_out_str(hl->o, "\n");
}

KITE_API void kite_stats_print(int fd) {
  kite_snapshot_t sn;
  _kite_snapshot(&sn);
  kite_out_t o = {.len = 0, .fd = fd};
  _kite_out_str(&o, "kite statistics (pid ");
  _kite_out_u64(&o, (uint64_t)_kite_os_getpid());
  _kite_out_str(&o, ", program ");
  out_program(&o);
  _kite_out_str(&o, ")\n");
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    const kite_stat_field_t *f = &_kite_stat_fields[i];
    _kite_out_str(&o, "  ");
    _kite_out_str(&o, f->label);
    _kite_out_str(&o, ": ");
    out_value(&o, f, sn.v[i]);
    _kite_out_str(&o, " (");
    _kite_out_str(&o, f->doc);
    _kite_out_str(&o, ")\n");
  }
  _kite_out_str(&o, "  class      size  live blocks   live bytes   pages       issued\n");
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!sn.s.issued[c] && !sn.l.pages[c]) continue;
    _kite_out_str(&o, "  ");
    _kite_out_u64w(&o, c, 5);
    _kite_out_u64w(&o, _kite_class_size_[c], 10);
    _kite_out_u64w(&o, sn.l.blocks[c], 13);
    _kite_out_u64w(&o, sn.l.bytes[c], 13);
    _kite_out_u64w(&o, sn.l.pages[c], 8);
    _kite_out_u64w(&o, sn.s.issued[c], 13);
    _kite_out_str(&o, "\n");
  }
  heap_lines_t hl = {&o, 0};
  _kite_heap_foreach(text_heap, &hl);
  _kite_out_flush(&o);
}

/* ---- JSON (schema: docs/stats.md; bump "schema" on any incompatible change): the table's
 * fields in its order, each group one object; the size classes close "small" ---- */

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
  jkv(hj->o, "remote_frees", hv.remote_frees, false);
  _kite_out_str(hj->o, "}");
}

static void json_classes(kite_out_t *o, const kite_snapshot_t *sn) {
  _kite_out_str(o, ", \"classes\": [");
  bool first = true;
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    if (!sn->s.issued[c] && !sn->l.pages[c]) continue;
    _kite_out_str(o, first ? "\n    {" : ",\n    {");
    first = false;
    jkv(o, "class", c, true);
    jkv(o, "size", _kite_class_size_[c], true);
    jkv(o, "live_blocks", sn->l.blocks[c], true);
    jkv(o, "live_bytes", sn->l.bytes[c], true);
    jkv(o, "pages", sn->l.pages[c], true);
    jkv(o, "issued", sn->s.issued[c], false);
    _kite_out_str(o, "}");
  }
  _kite_out_str(o, "]");
}

KITE_API void kite_stats_print_json(int fd) {
  kite_snapshot_t sn;
  _kite_snapshot(&sn);
  kite_out_t o = {.len = 0, .fd = fd};
  _kite_out_str(&o, "{\"schema\": 1, \"version\": \"");
  _kite_out_str(&o, kite_version());
  _kite_out_str(&o, "\", ");
  jkv(&o, "pid", (uint64_t)_kite_os_getpid(), false);
  _kite_out_str(&o, ", \"program\": \"");
  out_program(&o);
  _kite_out_str(&o, "\"");
  const char *group = "";
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    const kite_stat_field_t *f = &_kite_stat_fields[i];
    if (strcmp(f->group, group) != 0) { /* close the open group, open this one */
      if (strcmp(group, "small") == 0) json_classes(&o, &sn);
      if (*group) _kite_out_str(&o, "}");
      _kite_out_str(&o, ",\n  ");
      if (*f->group) { _kite_out_str(&o, "\""); _kite_out_str(&o, f->group); _kite_out_str(&o, "\": {"); }
      group = f->group;
    } else {
      _kite_out_str(&o, i == 0 ? ",\n  " : ", ");
    }
    jkv(&o, f->key, sn.v[i], false);
  }
  if (strcmp(group, "small") == 0) json_classes(&o, &sn);
  if (*group) _kite_out_str(&o, "}");
  _kite_out_str(&o, ",\n  \"threads\": [");
  heap_json_t hj = {&o, 0};
  _kite_heap_foreach(json_heap, &hj);
  _kite_out_str(&o, "]}\n");
  _kite_out_flush(&o);
}

KITE_API void kite_stats_get(kite_stats_t *out) {
  kite_snapshot_t sn;
  _kite_snapshot(&sn);
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++)
    *(unsigned long long *)((char *)out + _kite_stat_fields[i].get) = sn.v[i];
}

/* The public numbers are the table's indexes (options.h O3). */
_Static_assert(KITE_OPTION_SHOW_STATS == (int)KITE_OPT_SHOW_STATS && KITE_OPTION_VERBOSE == (int)KITE_OPT_VERBOSE &&
               KITE_OPTION_ABORT_ON_ERROR == (int)KITE_OPT_ABORT_ON_ERROR &&
               KITE_OPTION_PURGE_DELAY_MS == (int)KITE_OPT_PURGE_DELAY_MS &&
               KITE_OPTION_HUGEPAGES == (int)KITE_OPT_HUGEPAGES && KITE_OPTION_BACKGROUND == (int)KITE_OPT_BACKGROUND &&
               KITE_OPTION_GUARDED_SAMPLE == (int)KITE_OPT_GUARDED_SAMPLE &&
               KITE_OPTION_PROF_SAMPLE == (int)KITE_OPT_PROF_SAMPLE && KITE_OPTION_PROF_LEAKS == (int)KITE_OPT_PROF_LEAKS &&
               KITE_OPTION_PROF_PEAK + 1 == (int)KITE_OPT_COUNT,
               "kite_option_t and kite_opt_t differ");

KITE_API int kite_prof_dump(const char *path) { /* prof.h */
  _kite_options_ensure();
  int rc = path ? _kite_prof_dump(path) : EINVAL;
  if (rc) errno = rc;
  return rc ? -1 : 0;
}

KITE_API long kite_option_get(kite_option_t option) {
  _kite_options_ensure();
  if ((unsigned)option >= KITE_OPT_COUNT) { errno = EINVAL; return -1; }
  return (long)_kite_opt((kite_opt_t)option);
}

KITE_API int kite_option_set(kite_option_t option, long value) {
  _kite_options_ensure();
  if ((unsigned)option >= KITE_OPT_COUNT || !_kite_option_store((kite_opt_t)option, value)) {
    errno = EINVAL;
    return -1;
  }
  if (option == KITE_OPTION_BACKGROUND) _kite_purger_enable((int)value);
  return 0;
}

/* Every validator, each under the lock that guards its structure (_kite_heap_lock, the huge cache
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
