/* src/prof_write.c -- the heap profile as pprof's profile.proto message (contract in
 * prof.h), encoded here from the published schema (github.com/google/pprof, proto/
 * profile.proto), without allocating: messages are built in stack buffers, the file is
 * written through a 64 KiB buffer of the stack, the table of distinct addresses is a
 * mapping of its own, unmapped at the end.
 *
 * The Profile message's fields, each written where it is ready (protobuf concatenates
 * the entries of a repeated field wherever they stand): string_table (6) entries first for
 * the fixed names, then per mapping its file name before the mapping (3); sample_type (1);
 * per sample its new locations (4) before it (2). Locations carry an address and a mapping
 * id and no function: pprof symbolizes them from the mapped files. Addresses are the
 * return addresses less one, so each names its call's line. drop_frames (7) names kite's
 * entry points, for a kite linked into the program, whose frames the capture keeps.
 *
 * Invariants
 *   W1 String i of the table is the i-th string_table entry written; entry 0 is "".
 *   W2 Every location id a sample names was written before it; ids are 1 + the address's
 *      slot in the table of distinct addresses.
 */
#define _GNU_SOURCE
#include "prof.h"
#include "os.h"
#include <errno.h>
#include <string.h>

#define MAPPINGS_MAX 512
#define MAPS_BYTES ((size_t)1 << 20) /* /proc/self/maps read at most */

typedef struct {
  int fd, err;
  size_t len;
  uint8_t buf[65536];
} sink_t;

static void sink_put(sink_t *o, const void *p, size_t n) {
  if (o->err) return;
  if (o->len + n > sizeof o->buf) {
    if (!_kite_os_write_all(o->fd, o->buf, o->len)) o->err = errno ? errno : EIO;
    o->len = 0;
  }
  if (n > sizeof o->buf) {
    if (!o->err && !_kite_os_write_all(o->fd, p, n)) o->err = errno ? errno : EIO;
    return;
  }
  memcpy(o->buf + o->len, p, n);
  o->len += n;
}

/* A message under construction, in a stack buffer (the largest, a sample, is below 400 bytes). */
typedef struct { size_t len; uint8_t b[1024]; } msg_t;

static void varint(msg_t *m, uint64_t v) {
  while (v >= 0x80) { m->b[m->len++] = (uint8_t)(v | 0x80); v >>= 7; }
  m->b[m->len++] = (uint8_t)v;
}
static void field_u64(msg_t *m, unsigned field, uint64_t v) { /* wire type 0 */
  varint(m, (uint64_t)field << 3);
  varint(m, v);
}
static void field_bytes(msg_t *m, unsigned field, const void *p, size_t n) { /* wire type 2 */
  varint(m, (uint64_t)field << 3 | 2);
  varint(m, n);
  memcpy(m->b + m->len, p, n);
  m->len += n;
}
/* Field `field` of the Profile, holding message or string m. */
static void emit(sink_t *o, unsigned field, const msg_t *m) {
  msg_t head;
  head.len = 0;
  varint(&head, (uint64_t)field << 3 | 2);
  varint(&head, m->len);
  sink_put(o, head.b, head.len);
  sink_put(o, m->b, m->len);
}
static void emit_string(sink_t *o, const char *s, size_t n) {
  msg_t m; /* (not zeroed, here or below: only b[0, len) is ever read) */
  if (n > sizeof m.b) n = sizeof m.b;
  memcpy(m.b, s, n);
  m.len = n;
  emit(o, 6, &m);
}

/* The strings written first (W1), by index. */
enum { S_EMPTY, S_ALLOC_OBJECTS, S_COUNT, S_ALLOC_SPACE, S_BYTES, S_INUSE_OBJECTS, S_INUSE_SPACE, S_SPACE, S_DROP, S_FIXED };
static const char *const fixed[S_FIXED] = {
  "", "alloc_objects", "count", "alloc_space", "bytes", "inuse_objects", "inuse_space", "space",
  /* kite's entry points and what they tail-call, with everything they call */
  ("(_?kite_.*|malloc|calloc|realloc|reallocarray|free|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|"
   "malloc_generic.*|realloc_.*|alloc_large|alloc_aligned|prof_small.*|operator new.*|operator delete.*)"),
};

typedef struct { uintptr_t lo, hi; } range_t;

static uint64_t hex(const char **s) {
  uint64_t v = 0;
  for (;; (*s)++) {
    char c = **s;
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
    if (d == 16) return v;
    v = v << 4 | d;
  }
}

/* One line of /proc/self/maps, "lo-hi perms offset dev inode   path": an executable
 * mapping of a file is written as Mapping id (its file name as a string first). */
static bool maps_line(sink_t *o, const char *s, const char *end, uint32_t *strings, range_t *r, uint32_t *n) {
  const char *perms = memchr(s, ' ', (size_t)(end - s)); /* most lines are not executable: skipped unparsed */
  if (!perms || end - perms < 5 || perms[3] != 'x') return false;
  uint64_t lo = hex(&s);
  if (*s++ != '-') return false;
  uint64_t hi = hex(&s);
  if (end - s < 6 || s[3] != 'x') return false;
  s += 6;
  uint64_t off = hex(&s);
  s = memchr(s, '/', (size_t)(end - s)); /* the path: no '/' in the device and inode before it */
  if (!s || *n == MAPPINGS_MAX) return false;
  emit_string(o, s, (size_t)(end - s));
  msg_t m;
  m.len = 0;
  field_u64(&m, 1, *n + 1);
  field_u64(&m, 2, lo);
  field_u64(&m, 3, hi);
  field_u64(&m, 4, off);
  field_u64(&m, 5, (*strings)++);
  emit(o, 3, &m);
  r[(*n)++] = (range_t){lo, hi};
  return true;
}

/* The executable file mappings (W1: their names follow the fixed strings). */
static uint32_t write_mappings(sink_t *o, range_t *r) {
  uint32_t n = 0, strings = S_FIXED;
  int fd = _kite_os_open("/proc/self/maps", false);
  if (fd < 0) return 0;
  char *text = _kite_os_map_aligned(MAPS_BYTES, KITE_OS_PAGE, NULL);
  size_t len = 0;
  long got = 1;
  while (text && len < MAPS_BYTES && (got = _kite_os_read(fd, text + len, MAPS_BYTES - len)) > 0) len += (size_t)got;
  _kite_os_close(fd);
  if (!text) return 0;
  for (const char *s = text, *e; s < text + len; s = e + 1) {
    e = memchr(s, '\n', (size_t)(text + len - s));
    if (!e) break;
    maps_line(o, s, e, &strings, r, &n);
  }
  _kite_os_unmap(text, MAPS_BYTES);
  return n;
}

static uint32_t mapping_of(const range_t *r, uint32_t n, uintptr_t a) {
  for (uint32_t i = 0; i < n; i++)
    if (a >= r[i].lo && a < r[i].hi) return i + 1;
  return 0;
}

typedef struct { uintptr_t *slot; size_t cap; const range_t *maps; uint32_t n_maps; } locs_t;

/* The location id of address a, written first if new (W2); 0 when the table is full. */
static uint64_t location(sink_t *o, locs_t *t, uintptr_t a) {
  size_t i = (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & (t->cap - 1);
  for (size_t probes = 0; probes < t->cap; probes++, i = (i + 1) & (t->cap - 1)) {
    if (t->slot[i] == a) return i + 1;
    if (t->slot[i]) continue;
    t->slot[i] = a;
    msg_t m;
    m.len = 0;
    field_u64(&m, 1, i + 1);
    uint32_t map = mapping_of(t->maps, t->n_maps, a);
    if (map) field_u64(&m, 2, map);
    field_u64(&m, 3, a);
    emit(o, 4, &m);
    return i + 1;
  }
  return 0;
}

static void write_sample(sink_t *o, locs_t *t, const kite_prof_row_t *row) {
  msg_t ids, vals, m;
  ids.len = vals.len = m.len = 0;
  for (uint32_t i = 0; i < row->depth; i++) {
    uint64_t id = location(o, t, (uintptr_t)row->pc[i] - 1);
    if (id) varint(&ids, id);
  }
  const double v[4] = {row->alloc_n, row->alloc_b, row->live_n, row->live_b};
  for (int i = 0; i < 4; i++) varint(&vals, (uint64_t)(v[i] + 0.5)); /* int64, never negative */
  if (ids.len) field_bytes(&m, 1, ids.b, ids.len); /* packed */
  field_bytes(&m, 2, vals.b, vals.len);
  emit(o, 2, &m);
}

static void value_type(sink_t *o, unsigned field, uint64_t type, uint64_t unit) {
  msg_t m;
  m.len = 0;
  field_u64(&m, 1, type);
  field_u64(&m, 2, unit);
  emit(o, field, &m);
}

int _kite_prof_write(int fd, bool (*next)(void *arg, kite_prof_row_t *row), void *arg, size_t max_pcs,
                     uint64_t period) {
  static sink_t sink; /* 64 KiB: off the stack; the caller holds prof_lock (P2) */
  sink_t *o = &sink;
  o->fd = fd;
  o->err = 0;
  o->len = 0;
  for (int i = 0; i < S_FIXED; i++) emit_string(o, fixed[i], strlen(fixed[i]));
  value_type(o, 1, S_ALLOC_OBJECTS, S_COUNT);
  value_type(o, 1, S_ALLOC_SPACE, S_BYTES);
  value_type(o, 1, S_INUSE_OBJECTS, S_COUNT);
  value_type(o, 1, S_INUSE_SPACE, S_BYTES);
  range_t maps[MAPPINGS_MAX];
  locs_t t = {.maps = maps, .n_maps = write_mappings(o, maps)};
  t.cap = 1024;
  while (t.cap < 2 * max_pcs) t.cap *= 2;
  t.slot = _kite_os_map_aligned(t.cap * sizeof(uintptr_t), KITE_OS_PAGE, NULL);
  if (!t.slot) return ENOMEM;
  kite_prof_row_t row;
  while (next(arg, &row)) write_sample(o, &t, &row);
  _kite_os_unmap(t.slot, t.cap * sizeof(uintptr_t));
  msg_t m;
  m.len = 0;
  field_u64(&m, 7, S_DROP);
  field_u64(&m, 12, period);
  field_u64(&m, 14, S_INUSE_SPACE);
  sink_put(o, m.b, m.len);
  value_type(o, 11, S_SPACE, S_BYTES);
  if (!o->err && o->len && !_kite_os_write_all(fd, o->buf, o->len)) o->err = errno ? errno : EIO;
  return o->err;
}
