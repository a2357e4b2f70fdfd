/* src/prof_write.c -- the heap profile as pprof's profile.proto message (contract in
 * prof.h), encoded here from the published schema (github.com/google/pprof, proto/
 * profile.proto), without allocating: messages are built in stack buffers, the file is
 * written through a 64 KiB buffer of the stack, the table of distinct addresses is a
 * mapping of its own, unmapped at the end.
 *
 * The Profile message's fields, each written where it is ready (protobuf concatenates
 * the entries of a repeated field wherever they stand): string_table (6) entries first for
 * the fixed names; sample_type (1); per sample its new locations (4) before it (2), and
 * before a location whose mapping is new, the mapping's file name and the mapping (3). Locations carry an address and a mapping
 * id and no function: pprof symbolizes them from the mapped files. Addresses are the
 * return addresses less one, so each names its call's line. drop_frames (7) names kite's
 * entry points, for a kite linked into the program, whose frames the capture keeps.
 *
 * Invariants
 *   W1 String i of the table is the i-th string_table entry written; entry 0 is "".
 *   W2 Every location id a sample names was written before it; ids are 1 + the address's
 *      slot in the table of distinct addresses.
 *   W3 Only the mappings that hold an address a sample names are written, each before the
 *      first location in it, and no two overlap: a profile without samples reads nothing.
 *      An address's mapping is the executable segment of the object the loader reports
 *      for it (_dl_find_object and the object's program headers, as the kernel mapped
 *      them: whole pages), which costs no system call but readlink for the program's own
 *      path; /proc/self/maps is read (once a write, every executable file mapping not
 *      written yet) only where the loader cannot tell the file (a name that is not a
 *      path, no ELF header at the object's start, a glibc before 2.35 or another libc).
 */
#define _GNU_SOURCE
#include "prof.h"
#include "os.h"
#include <errno.h>
#include <string.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define PROF_LOADER 1
#include <link.h>
#include <elf.h>
#endif

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

/* The mappings written so far, and where the next string goes (W1). */
typedef struct {
  uintptr_t *slot; size_t cap;  /* the table of distinct addresses */
  range_t maps[MAPPINGS_MAX];
  uint32_t n_maps, strings;
  bool read_maps;               /* /proc/self/maps read: every file mapping is written */
  char program[4096];           /* the program's path */
} locs_t;

/* Mapping n_maps + 1: [lo, hi) of file `path` (n bytes) from file offset off, its name
 * written first (W1, W3). */
static uint32_t mapping_put(sink_t *o, locs_t *t, const char *path, size_t n, uint64_t lo, uint64_t hi,
                            uint64_t off) {
  emit_string(o, path, n);
  msg_t m;
  m.len = 0;
  field_u64(&m, 1, t->n_maps + 1);
  field_u64(&m, 2, lo);
  field_u64(&m, 3, hi);
  field_u64(&m, 4, off);
  field_u64(&m, 5, t->strings++);
  emit(o, 3, &m);
  t->maps[t->n_maps++] = (range_t){lo, hi};
  return t->n_maps;
}

static uint64_t hex(const char **s) {
  uint64_t v = 0;
  for (;; (*s)++) {
    char c = **s;
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
    if (d == 16) return v;
    v = v << 4 | d;
  }
}

static bool overlaps(const locs_t *t, uint64_t lo, uint64_t hi) {
  for (uint32_t i = 0; i < t->n_maps; i++)
    if (lo < t->maps[i].hi && t->maps[i].lo < hi) return true;
  return false;
}

/* One line of /proc/self/maps, "lo-hi perms offset dev inode   path": an executable
 * mapping of a file not written yet is written. */
static void maps_line(sink_t *o, locs_t *t, const char *s, const char *end) {
  const char *perms = memchr(s, ' ', (size_t)(end - s)); /* most lines are not executable: skipped unparsed */
  if (!perms || end - perms < 5 || perms[3] != 'x') return;
  uint64_t lo = hex(&s);
  if (*s++ != '-') return;
  uint64_t hi = hex(&s);
  if (end - s < 6 || s[3] != 'x') return;
  s += 6;
  uint64_t off = hex(&s);
  s = memchr(s, '/', (size_t)(end - s)); /* the path: no '/' in the device and inode before it */
  if (!s || t->n_maps == MAPPINGS_MAX || overlaps(t, lo, hi)) return;
  mapping_put(o, t, s, (size_t)(end - s), lo, hi, off);
}

/* Every executable file mapping of /proc/self/maps not written yet, once a write. */
static void read_maps(sink_t *o, locs_t *t) {
  t->read_maps = true;
  int fd = _kite_os_open("/proc/self/maps", false);
  if (fd < 0) return;
  char *text = _kite_os_map_aligned(MAPS_BYTES, KITE_OS_PAGE, NULL);
  size_t len = 0;
  long got = 1;
  while (text && len < MAPS_BYTES && (got = _kite_os_read(fd, text + len, MAPS_BYTES - len)) > 0) len += (size_t)got;
  _kite_os_close(fd);
  if (!text) return;
  for (const char *s = text, *e; s < text + len; s = e + 1) {
    e = memchr(s, '\n', (size_t)(text + len - s));
    if (!e) break;
    maps_line(o, t, s, e);
  }
  _kite_os_unmap(text, MAPS_BYTES);
}

#ifdef PROF_LOADER
/* The executable segment holding address a of an object the loader knows (W3): 1 when it
 * was written, 0 when a lies in no such segment, -1 when the object's file or headers
 * cannot be told (a name that is not a path, a file whose ELF header is not mapped). */
static int loader_mapping(sink_t *o, locs_t *t, uintptr_t a) {
  struct dl_find_object fo;
  if (_dl_find_object((void *)a, &fo) != 0 || !fo.dlfo_link_map || !fo.dlfo_link_map->l_name) return 0;
  const struct link_map *lm = fo.dlfo_link_map;
  const char *path = lm->l_name;
  size_t n = strlen(path);
  if (n == 0) path = t->program, n = _kite_os_program_path(t->program, sizeof t->program); /* the program */
  const ElfW(Ehdr) *eh = fo.dlfo_map_start;
  uintptr_t map_end = (uintptr_t)fo.dlfo_map_end, ph = (uintptr_t)eh + (eh ? eh->e_phoff : 0);
  if (n == 0 || path[0] != '/' || (uintptr_t)fo.dlfo_map_end - (uintptr_t)eh < sizeof *eh ||
      memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_phentsize != sizeof(ElfW(Phdr)) || ph < (uintptr_t)eh ||
      ph > map_end || (map_end - ph) / sizeof(ElfW(Phdr)) < eh->e_phnum)
    return -1;
  const ElfW(Phdr) *p = (const ElfW(Phdr) *)ph;
  for (unsigned i = 0; i < eh->e_phnum; i++) {
    if (p[i].p_type != PT_LOAD || !(p[i].p_flags & PF_X)) continue;
    uintptr_t lo = lm->l_addr + p[i].p_vaddr, hi = lo + p[i].p_memsz, page = KITE_OS_PAGE;
    if (a < lo || a >= hi) continue;
    /* as the kernel mapped it: whole pages, the offset of the first */
    lo &= ~(page - 1);
    hi = (hi + page - 1) & ~(page - 1);
    if (overlaps(t, lo, hi)) return 0;
    mapping_put(o, t, path, n, lo, hi, p[i].p_offset & ~(uint64_t)(page - 1));
    return 1;
  }
  return 0;
}
#endif

/* The mapping id of address a, its mapping written first if new (W3); 0 for none. */
static uint32_t mapping_of(sink_t *o, locs_t *t, uintptr_t a) {
  for (uint32_t i = 0; i < t->n_maps; i++)
    if (a >= t->maps[i].lo && a < t->maps[i].hi) return i + 1;
  if (t->read_maps || t->n_maps == MAPPINGS_MAX) return 0;
#ifdef PROF_LOADER
  int got = loader_mapping(o, t, a);
  if (got >= 0) return got ? t->n_maps : 0;
#endif
  read_maps(o, t);
  for (uint32_t i = 0; i < t->n_maps; i++)
    if (a >= t->maps[i].lo && a < t->maps[i].hi) return i + 1;
  return 0;
}

/* The location id of address a, written first if new (W2); 0 when the table is full. */
static uint64_t location(sink_t *o, locs_t *t, uintptr_t a) {
  size_t i = (size_t)((a * 0x9E3779B97F4A7C15ull) >> 20) & (t->cap - 1);
  for (size_t probes = 0; probes < t->cap; probes++, i = (i + 1) & (t->cap - 1)) {
    if (t->slot[i] == a) return i + 1;
    if (t->slot[i]) continue;
    t->slot[i] = a;
    uint32_t map = mapping_of(o, t, a);
    msg_t m;
    m.len = 0;
    field_u64(&m, 1, i + 1);
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
  static locs_t t; /* (off the stack too, under the same lock) */
  t.n_maps = 0;
  t.strings = S_FIXED;
  t.read_maps = false;
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
