/* lab/trace/trace_io.c -- the trace parser (formats in trace_io.h and docs/trace-format.md).
 *
 * One pass over the text. State while parsing:
 *   idmap    open-addressing hash (linear probing, power-of-two capacity, load <= 1/2) from a
 *            trace id to its slot; entries are never removed (a slot is reused when its id is)
 *   live[s]  line that allocated slot s while s is live, 0 when s is dead
 * Invariant: live[s] != 0 exactly when the ops parsed so far leave slot s allocated.
 * Nothing here is timed; clarity of the error messages matters more than speed, but the
 * integer scanning is hand-written so a 5-million-line trace parses in well under a second.
 *
 * All memory comes from mmap and goes back with munmap (kt_vm_*), never from malloc: the
 * replay measures the process malloc's footprint, and blocks the parser had freed into that
 * malloc would otherwise be reused by the replay without showing up as RSS growth.
 */
#define _GNU_SOURCE
#include "trace_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- memory straight from the kernel; a 64-byte header keeps the mapping's size ---- */

#define KT_VM_HDR 64

static void *kt_vm_alloc(size_t n) { /* zeroed */
  size_t len = n + KT_VM_HDR;
  if (len < n) return NULL;
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  memcpy(p, &len, sizeof len);
  return p + KT_VM_HDR;
}
static void kt_vm_free(void *q) {
  if (!q) return;
  char *p = (char *)q - KT_VM_HDR;
  size_t len;
  memcpy(&len, p, sizeof len);
  munmap(p, len);
}
static void *kt_vm_realloc(void *q, size_t n) { /* new tail zeroed */
  if (!q) return kt_vm_alloc(n);
  char *p = (char *)q - KT_VM_HDR;
  size_t len, nlen = n + KT_VM_HDR;
  memcpy(&len, p, sizeof len);
  if (nlen < n) return NULL;
  char *np = mremap(p, len, nlen, MREMAP_MAYMOVE);
  if (np == MAP_FAILED) return NULL;
  memcpy(np, &nlen, sizeof nlen);
  return np + KT_VM_HDR;
}

typedef struct {
  uint64_t *keys;
  uint32_t *vals; /* slot + 1; 0 = empty */
  size_t cap;
  size_t used;
} kt_idmap_t;

typedef struct {
  const char *name;
  char *err;
  size_t errlen;
  uint32_t line;
  kt_idmap_t map;
  uint32_t *live;
  size_t live_cap;
  size_t n_slots;
  kt_op_t *ops;
  size_t n_ops, ops_cap;
} kt_parser_t;

static void kt_error(kt_parser_t *p, const char *fmt, ...) {
  int n = snprintf(p->err, p->errlen, "%s:%u: ", p->name, p->line);
  if (n < 0 || (size_t)n >= p->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static uint64_t kt_hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static bool kt_idmap_grow(kt_idmap_t *m) {
  size_t ncap = m->cap ? m->cap * 2 : 1024;
  uint64_t *nk = kt_vm_alloc(ncap * sizeof *nk);
  uint32_t *nv = kt_vm_alloc(ncap * sizeof *nv);
  if (!nk || !nv) {
    kt_vm_free(nk);
    kt_vm_free(nv);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->vals[i]) continue;
    size_t j = kt_hash(m->keys[i]) & (ncap - 1);
    while (nv[j]) j = (j + 1) & (ncap - 1);
    nk[j] = m->keys[i];
    nv[j] = m->vals[i];
  }
  kt_vm_free(m->keys);
  kt_vm_free(m->vals);
  m->keys = nk;
  m->vals = nv;
  m->cap = ncap;
  return true;
}

/* A fresh slot number, its live[] entry grown; KT_NO_SLOT (error set) when out of room. */
static uint32_t kt_new_slot(kt_parser_t *p) {
  if (p->n_slots >= p->live_cap) {
    size_t ncap = p->live_cap ? p->live_cap * 2 : 1024;
    uint32_t *nl = kt_vm_realloc(p->live, ncap * sizeof *nl);
    if (!nl) {
      kt_error(p, "out of memory while parsing");
      return KT_NO_SLOT;
    }
    p->live = nl;
    p->live_cap = ncap;
  }
  if (p->n_slots >= KT_NO_SLOT - 1) {
    kt_error(p, "too many distinct ids");
    return KT_NO_SLOT;
  }
  return (uint32_t)p->n_slots++;
}

/* Slot of `id`, creating one if `create`; KT_NO_SLOT if unknown (or out of memory, which
 * sets the error). `rebind` (with create) gives a known id a fresh slot: the .script's
 * "a ID" on a live ID, whose old block stays allocated and unreachable. */
static uint32_t kt_slot_of_ex(kt_parser_t *p, uint64_t id, bool create, bool rebind) {
  kt_idmap_t *m = &p->map;
  if (m->cap) {
    size_t j = kt_hash(id) & (m->cap - 1);
    while (m->vals[j]) {
      if (m->keys[j] == id) {
        if (!rebind) return m->vals[j] - 1;
        uint32_t s = kt_new_slot(p);
        if (s != KT_NO_SLOT) m->vals[j] = s + 1;
        return s;
      }
      j = (j + 1) & (m->cap - 1);
    }
  }
  if (!create) return KT_NO_SLOT;
  if ((m->used + 1) * 2 > m->cap && !kt_idmap_grow(m)) {
    kt_error(p, "out of memory while parsing");
    return KT_NO_SLOT;
  }
  uint32_t s = kt_new_slot(p);
  if (s == KT_NO_SLOT) return s;
  size_t j = kt_hash(id) & (m->cap - 1);
  while (m->vals[j]) j = (j + 1) & (m->cap - 1);
  m->keys[j] = id;
  m->vals[j] = s + 1;
  m->used++;
  return s;
}

static uint32_t kt_slot_of(kt_parser_t *p, uint64_t id, bool create) {
  return kt_slot_of_ex(p, id, create, false);
}

static kt_op_t *kt_push(kt_parser_t *p) {
  if (p->n_ops == p->ops_cap) {
    size_t ncap = p->ops_cap ? p->ops_cap * 2 : 4096;
    kt_op_t *n = kt_vm_realloc(p->ops, ncap * sizeof *n);
    if (!n) {
      kt_error(p, "out of memory while parsing");
      return NULL;
    }
    p->ops = n;
    p->ops_cap = ncap;
  }
  kt_op_t *op = &p->ops[p->n_ops++];
  memset(op, 0, sizeof *op);
  op->line = p->line;
  op->slot = op->old_slot = KT_NO_SLOT;
  return op;
}

/* ---- tokens ---- */

typedef struct {
  const char *s, *end; /* the rest of the current line */
} kt_cursor_t;

static bool kt_is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Next whitespace-separated token, or false at the end of the line. */
static bool kt_token(kt_cursor_t *c, const char **tok, size_t *len) {
  while (c->s < c->end && kt_is_space(*c->s)) c->s++;
  if (c->s >= c->end) return false;
  *tok = c->s;
  while (c->s < c->end && !kt_is_space(*c->s)) c->s++;
  *len = (size_t)(c->s - *tok);
  return true;
}

#define KT_FOREIGN UINT64_MAX

/* Parse a non-negative decimal number named `what`. allow_dash accepts "-" (returns
 * KT_FOREIGN). Returns false with the error set. */
static bool kt_number(kt_parser_t *p, kt_cursor_t *c, const char *what, bool allow_dash,
                      uint64_t *out) {
  const char *t;
  size_t n;
  if (!kt_token(c, &t, &n)) {
    kt_error(p, "missing %s", what);
    return false;
  }
  if (allow_dash && n == 1 && t[0] == '-') {
    *out = KT_FOREIGN;
    return true;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)(t[i] - '0');
    if (d > 9 || v > (UINT64_MAX - d) / 10) {
      kt_error(p, "%s '%.*s' is not a non-negative decimal number", what, (int)(n > 40 ? 40 : n), t);
      return false;
    }
    v = v * 10 + d;
  }
  if (v == KT_FOREIGN) {
    kt_error(p, "%s '%.*s' is too large", what, (int)n, t);
    return false;
  }
  *out = v;
  return true;
}

static bool kt_end_of_line(kt_parser_t *p, kt_cursor_t *c) {
  const char *t;
  size_t n;
  if (kt_token(c, &t, &n)) {
    kt_error(p, "unexpected trailing text '%.*s'", (int)(n > 40 ? 40 : n), t);
    return false;
  }
  return true;
}

/* ---- the semantic checks shared by both formats ---- */

static bool kt_alloc_into(kt_parser_t *p, kt_op_t *op, uint64_t id) {
  uint32_t s = kt_slot_of(p, id, true);
  if (s == KT_NO_SLOT) return false;
  if (p->live[s]) {
    kt_error(p, "id %llu allocated while still live (allocated at line %u)",
             (unsigned long long)id, p->live[s]);
    return false;
  }
  p->live[s] = p->line;
  op->slot = s;
  return true;
}

static bool kt_release(kt_parser_t *p, uint64_t id, const char *verb, uint32_t *slot) {
  uint32_t s = kt_slot_of(p, id, false);
  if (s == KT_NO_SLOT || !p->live[s]) {
    if (!p->err[0])
      kt_error(p, "%s of unknown id %llu (%s)", verb, (unsigned long long)id,
               s == KT_NO_SLOT ? "never allocated" : "already freed");
    return false;
  }
  p->live[s] = 0;
  *slot = s;
  return true;
}

/* The .script's semantics are the workshop harness's: an id names a slot holding a pointer
 * (NULL before its first use and after "f"). "a ID N" stores malloc(N) in the slot, and an
 * old block still there stays allocated and unreachable (a fresh slot takes the id); "f ID"
 * frees the slot's pointer and sets it to NULL, so a second "f" is free(NULL); "r ID N" is
 * realloc(slot, N), realloc(NULL, N) when the slot is NULL or was never used. */
static bool kt_parse_script_line(kt_parser_t *p, kt_cursor_t *c, const char *tok, size_t n) {
  if (n != 1 || (tok[0] != 'a' && tok[0] != 'r' && tok[0] != 'f')) {
    kt_error(p, "unknown op '%.*s' (a .script has a, r, f)", (int)(n > 40 ? 40 : n), tok);
    return false;
  }
  uint64_t id, size = 0;
  if (!kt_number(p, c, "id", false, &id)) return false;
  if (tok[0] != 'f' && !kt_number(p, c, "size", false, &size)) return false;
  if (!kt_end_of_line(p, c)) return false;
  kt_op_t *op = kt_push(p);
  if (!op) return false;
  op->size = size;
  uint32_t s = kt_slot_of(p, id, false);
  bool live = s != KT_NO_SLOT && p->live[s];
  switch (tok[0]) {
  case 'a':
    op->kind = KT_MALLOC;
    s = kt_slot_of_ex(p, id, true, live);
    if (s == KT_NO_SLOT) return false;
    p->live[s] = p->line;
    op->slot = s;
    return true;
  case 'f':
    op->kind = KT_FREE;
    if (!live) {
      op->flags = KT_OP_NULL; /* free(NULL) */
      return true;
    }
    p->live[s] = 0;
    op->slot = s;
    return true;
  default:
    op->kind = KT_REALLOC;
    if (live) {
      op->old_slot = s;
      p->live[s] = 0;
    } else {
      op->flags = KT_OP_NULL; /* realloc(NULL, n) */
    }
    return kt_alloc_into(p, op, id);
  }
}

static bool kt_parse_kite_line(kt_parser_t *p, kt_cursor_t *c, const char *tok, size_t n) {
  if (n != 1 || !strchr("mcarf", tok[0])) {
    kt_error(p, "unknown op '%.*s' (a kite trace has m, c, a, r, f)", (int)(n > 40 ? 40 : n), tok);
    return false;
  }
  uint64_t id = 0, id2 = 0, a = 0, size = 0, tid;
  char k = tok[0];
  if (!kt_number(p, c, k == 'r' ? "old id" : "id", k == 'f' || k == 'r', &id)) return false;
  if (k == 'r' && !kt_number(p, c, "new id", false, &id2)) return false;
  if (k == 'c' && !kt_number(p, c, "count", false, &a)) return false;
  if (k == 'a' && !kt_number(p, c, "alignment", false, &a)) return false;
  if (k != 'f' && !kt_number(p, c, "size", false, &size)) return false;
  if (!kt_number(p, c, "thread id", false, &tid)) return false;
  if (!kt_end_of_line(p, c)) return false;
  kt_op_t *op = kt_push(p);
  if (!op) return false;
  switch (k) {
  case 'm':
    op->kind = KT_MALLOC;
    op->size = size;
    return kt_alloc_into(p, op, id);
  case 'c':
    if (a && size > UINT64_MAX / a) {
      kt_error(p, "calloc count * size overflows");
      return false;
    }
    op->kind = KT_CALLOC;
    op->align = a;
    op->size = a * size;
    return kt_alloc_into(p, op, id);
  case 'a':
    if (a == 0 || (a & (a - 1))) {
      kt_error(p, "alignment %llu is not a power of two", (unsigned long long)a);
      return false;
    }
    op->kind = KT_ALIGNED;
    op->align = a;
    op->size = size;
    return kt_alloc_into(p, op, id);
  case 'f':
    op->kind = KT_FREE;
    if (id == KT_FOREIGN) return true;
    return kt_release(p, id, "free", &op->slot);
  default:
    op->kind = KT_REALLOC;
    op->size = size;
    if (id != KT_FOREIGN && !kt_release(p, id, "realloc", &op->old_slot)) return false;
    return kt_alloc_into(p, op, id2);
  }
}

static bool kt_has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

int kt_parse_buffer(const char *buf, size_t len, const char *name, int format, kt_trace_t *out,
                    char *err, size_t errlen) {
  kt_parser_t p;
  memset(&p, 0, sizeof p);
  memset(out, 0, sizeof *out);
  char dummy[1];
  if (!err || !errlen) {
    err = dummy;
    errlen = sizeof dummy;
  }
  err[0] = 0;
  p.name = name ? name : "(trace)";
  p.err = err;
  p.errlen = errlen;
  bool ok = true;
  const char *s = buf, *end = buf + len;
  while (s < end && ok) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *eol = nl ? nl : end;
    p.line++;
    kt_cursor_t c = {s, eol};
    const char *tok;
    size_t n;
    s = nl ? nl + 1 : end;
    if (memchr(c.s, 0, (size_t)(eol - c.s))) {
      kt_error(&p, "NUL byte in a text trace");
      ok = false;
      break;
    }
    if (!kt_token(&c, &tok, &n)) continue; /* blank */
    if (tok[0] == '#') {
      if (format == KT_FORMAT_AUTO) {
        static const char hdr[] = "# kite-trace v";
        size_t hl = sizeof hdr - 1;
        if ((size_t)(eol - tok) >= hl && memcmp(tok, hdr, hl) == 0) {
          if ((size_t)(eol - tok) > hl && tok[hl] == '1' &&
              (eol - tok == (ptrdiff_t)hl + 1 || kt_is_space(tok[hl + 1]))) {
            format = KT_FORMAT_KITE;
            static const char raw[] = " raw";
            if ((size_t)(eol - tok) >= hl + 1 + sizeof raw - 1 &&
                memcmp(tok + hl + 1, raw, sizeof raw - 1) == 0) {
              kt_error(&p, "a raw capture (lines in thread order); finalize it with "
                           "tools/kite-trace --finalize RAW OUT");
              ok = false;
            }
          } else {
            kt_error(&p, "unsupported trace version '%.*s'", (int)(eol - tok), tok);
            ok = false;
          }
        }
      }
      continue;
    }
    if (format == KT_FORMAT_AUTO) format = KT_FORMAT_SCRIPT;
    ok = format == KT_FORMAT_KITE ? kt_parse_kite_line(&p, &c, tok, n)
                                  : kt_parse_script_line(&p, &c, tok, n);
  }
  kt_vm_free(p.map.keys);
  kt_vm_free(p.map.vals);
  kt_vm_free(p.live);
  if (!ok) {
    kt_vm_free(p.ops);
    return -1;
  }
  out->ops = p.ops;
  out->n_ops = p.n_ops;
  out->n_slots = p.n_slots;
  out->n_lines = p.line;
  out->format = format == KT_FORMAT_AUTO ? KT_FORMAT_SCRIPT : format;
  return 0;
}

int kt_parse_file(const char *path, kt_trace_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", path);
    close(fd);
    return -1;
  }
  size_t len = (size_t)st.st_size;
  const char *buf = "";
  void *map = NULL;
  if (len) {
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      snprintf(err, errlen, "%s: cannot map: %s", path, strerror(errno));
      close(fd);
      return -1;
    }
    buf = map;
  }
  close(fd);
  int fmt = kt_has_suffix(path, ".script") ? KT_FORMAT_SCRIPT : KT_FORMAT_AUTO;
  int rc = kt_parse_buffer(buf, len, path, fmt, out, err, errlen);
  if (map) munmap(map, len);
  return rc;
}

void kt_trace_free(kt_trace_t *t) {
  kt_vm_free(t->ops);
  memset(t, 0, sizeof *t);
}
