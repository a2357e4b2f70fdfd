/* src/stack.c -- call stacks (contract and invariants S1-S6 in stack.h).
 *
 * Capture on x86-64 glibc walks the unwind tables itself (the walk below): for each return
 * address it needs three numbers -- where the frame's CFA is (the stack pointer or the frame
 * pointer plus an offset), that the return address lies just below the CFA, and where the
 * caller's frame pointer was saved, if it was -- and it keeps them per address in a cache
 * shared by all threads, so a capture in a program that has run a while reads no unwind
 * table at all: a known return address costs one load of its cache word and a few checks.
 * On a miss the rule comes from the object's .eh_frame_hdr search table and its FDE's
 * call-frame program (DWARF's CFA rules), both read in the mapped object; the FDE's CIE,
 * shared by most FDEs of an object, is parsed and its initial instructions followed once
 * (the CIE memo), and the common encodings are read inline. Only the
 * stack is read at addresses the walk computes, and only inside the thread's stack as S5
 * bounds it. A frame whose rule the walk cannot follow (a CFA given by an expression, the
 * frame pointer kept in another register, a signal frame) hands the whole capture to
 * libgcc's unwinder, which follows every rule; so does a thread whose stack bounds are not
 * known (a stack of the program's own making). Other targets use libgcc's unwinder.
 */
#define _GNU_SOURCE
#include "stack.h"
#include "os.h"
#include <unwind.h>
#include <link.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

uint64_t _kite_stack_reentered, _kite_stack_by_libgcc;
static __thread bool capturing __attribute__((tls_model("initial-exec")));

bool _kite_stack_busy(void) {
  if (capturing) __atomic_fetch_add(&_kite_stack_reentered, 1, __ATOMIC_RELAXED);
  return capturing;
}

/* Another libc (musl): the compiler's unwinder library is built against glibc and cannot be
 * linked there, so no stacks are captured (the reports say so by printing none). */
#if defined(__GLIBC__)
#define STACK_UNWIND 1
#endif
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define STACK_FIND_OBJECT 1
#endif
#if defined(STACK_FIND_OBJECT) && defined(__x86_64__)
#define STACK_WALK 1
#endif

/* ---- libgcc's unwinder: every rule, at a price ---- */

/* The frames before the one returning to `from` are kite's own: left out, then `skip` more. */
typedef struct { kite_stack_t *st; uint32_t skip; uintptr_t from; } unwind_t;

#ifdef STACK_UNWIND
static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg) {
  unwind_t *w = arg;
  uintptr_t pc = _Unwind_GetIP(ctx);
  if (pc == 0) return _URC_END_OF_STACK;
  if (w->from) {
    if (pc != w->from) return _URC_NO_REASON;
    w->from = 0;
  }
  if (w->skip) { w->skip--; return _URC_NO_REASON; }
  w->st->pc[w->st->depth++] = (void *)pc;
  return w->st->depth == KITE_STACK_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}
#endif

/* Can the unwinder find kite's own tables? Not in a fully static program: glibc's
 * _dl_find_object knows no unwind tables there, and libgcc's unwinder, finding none for
 * its own frame, aborts the process. 0: not looked yet, 1: yes, 2: no (no stacks). */
static int unwind_state;
static bool unwind_works(void) {
  int s = __atomic_load_n(&unwind_state, __ATOMIC_RELAXED);
  if (likely(s != 0)) return s == 1;
#ifdef STACK_FIND_OBJECT
  struct dl_find_object fo;
  s = _dl_find_object((void *)(uintptr_t)unwind_works, &fo) == 0 && fo.dlfo_eh_frame != NULL ? 1 : 2;
#elif defined(STACK_UNWIND)
  s = 1;
#else
  s = 2;
#endif
  __atomic_store_n(&unwind_state, s, __ATOMIC_RELAXED);
  return s == 1;
}

/* The stack from the frame that return address `from` returns to, leaving out `skip` frames
 * from there, by libgcc's unwinder (which also reports the frames of this function and its
 * callers in kite: they are found by `from`, whatever the compiler inlined). */
static KITE_NOINLINE void unwind_libgcc(kite_stack_t *st, uint32_t skip, uintptr_t from) {
  st->depth = 0;
  unwind_t w = {st, skip, from};
#ifdef STACK_UNWIND
  _Unwind_Backtrace(on_frame, &w);
#else
  (void)w;
#endif
}

#ifdef STACK_WALK
/* ---- the rules of one return address ---- */

enum { RULE_NONE = 0, RULE_OK = 1, RULE_END = 2, RULE_HARD = 3 };
enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

typedef struct {
  uint8_t kind;      /* RULE_OK: follow; RULE_END: the outermost frame; RULE_HARD: not by us */
  uint8_t cfa_rbp;   /* CFA = (cfa_rbp ? rbp : rsp) + cfa_off */
  int32_t cfa_off;
  int32_t rbp_at;    /* the caller's rbp is saved at CFA + rbp_at; 0: rbp is the caller's */
} rule_t;

/* A register's rule while the call-frame program runs: unchanged, saved at CFA + off,
 * undefined, or one this walk does not follow. */
enum { HOW_SAME = 0, HOW_AT, HOW_UNDEF, HOW_OTHER };
typedef struct { uint8_t cfa_reg, rbp_how, ra_how; int64_t cfa_off, rbp_off, ra_off; } cfs_t;

typedef struct {
  int64_t data_align;
  uint64_t code_align;
  uint64_t ra_reg;
  uint8_t fde_enc;
  bool signal, z;
  const uint8_t *ins, *end; /* the CIE's initial instructions */
} cie_t;

/* LEB128 numbers: most are one byte (offsets, registers, advances), read inline; the loop
 * takes the rest. */
static KITE_NOINLINE uint64_t uleb_long(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  unsigned sh = 0;
  while (*p < end) {
    uint8_t b = *(*p)++;
    if (sh < 64) v |= (uint64_t)(b & 0x7f) << sh;
    sh += 7;
    if (!(b & 0x80)) break;
  }
  return v;
}

static inline uint64_t uleb(const uint8_t **p, const uint8_t *end) {
  if (likely(*p < end && !(**p & 0x80))) return *(*p)++;
  return uleb_long(p, end);
}

static KITE_NOINLINE int64_t sleb_long(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  unsigned sh = 0;
  uint8_t b = 0;
  while (*p < end) {
    b = *(*p)++;
    if (sh < 64) v |= (uint64_t)(b & 0x7f) << sh;
    sh += 7;
    if (!(b & 0x80)) break;
  }
  if (sh < 64 && (b & 0x40)) v |= ~(uint64_t)0 << sh;
  return (int64_t)v;
}

static inline int64_t sleb(const uint8_t **p, const uint8_t *end) {
  if (likely(*p < end && !(**p & 0x80))) {
    uint8_t b = *(*p)++;
    return (b & 0x40) ? (int64_t)b - 0x80 : (int64_t)b;
  }
  return sleb_long(p, end);
}

/* A pointer encoded as DW_EH_PE `enc` at *p (advanced past it): absolute, or relative to
 * its own address (pcrel) or to `data` (datarel). False for an encoding not handled. */
static KITE_NOINLINE bool read_enc_any(const uint8_t **p, const uint8_t *end, uint8_t enc, uintptr_t data,
                                       uintptr_t *out) {
  const uint8_t *q = *p;
  uint64_t v;
  int32_t s4;
  uint32_t u4;
  switch (enc & 0x0f) {
  case 0x00: case 0x04: case 0x0c: if (end - q < 8) return false; __builtin_memcpy(&v, q, 8); q += 8; break;
  case 0x03: if (end - q < 4) return false; __builtin_memcpy(&u4, q, 4); v = u4; q += 4; break;
  case 0x0b: if (end - q < 4) return false; __builtin_memcpy(&s4, q, 4); v = (uint64_t)(int64_t)s4; q += 4; break;
  case 0x01: v = uleb(&q, end); break;
  case 0x09: v = (uint64_t)sleb(&q, end); break;
  default: return false;
  }
  switch (enc & 0x70) {
  case 0x00: break;
  case 0x10: v += (uintptr_t)*p; break;
  case 0x30: v += data; break;
  default: return false;
  }
  *p = q;
  *out = (uintptr_t)v;
  return true;
}

/* The same, inline for the encodings gcc and the linkers write (4 bytes, absolute or pcrel). */
static inline bool read_enc(const uint8_t **p, const uint8_t *end, uint8_t enc, uintptr_t data, uintptr_t *out) {
  if (likely((enc & 0x07) == 0x03 && (enc & 0x70) <= 0x10 && end - *p >= 4)) { /* udata4 or sdata4 */
    uint32_t u4;
    __builtin_memcpy(&u4, *p, 4);
    uintptr_t v = (enc & 0x08) ? (uintptr_t)(int64_t)(int32_t)u4 : (uintptr_t)u4;
    *out = v + ((enc & 0x10) ? (uintptr_t)*p : 0);
    *p += 4;
    return true;
  }
  return read_enc_any(p, end, enc, data, out);
}

/* The CIE at c (augmentations z, R, P, L, S; version 1 or 3). */
static bool cie_parse(const uint8_t *c, cie_t *ci) {
  uint32_t len, id;
  __builtin_memcpy(&len, c, 4);
  __builtin_memcpy(&id, c + 4, 4);
  if (len == 0 || len == 0xffffffffu || id != 0 || (c[8] != 1 && c[8] != 3)) return false;
  const uint8_t *end = c + 4 + len, *aug = c + 9, *p = aug;
  while (p < end && *p) p++;
  if (p++ >= end || (aug[0] && aug[0] != 'z')) return false;
  ci->code_align = uleb(&p, end);
  ci->data_align = sleb(&p, end);
  ci->ra_reg = c[8] == 1 ? *p++ : uleb(&p, end);
  ci->fde_enc = 0;
  ci->signal = false;
  ci->z = aug[0] == 'z';
  if (ci->z) {
    uint64_t n = uleb(&p, end);
    const uint8_t *data_end = p + n;
    uintptr_t skip;
    for (const uint8_t *a = aug + 1; *a && p < data_end; a++) {
      if (*a == 'R') ci->fde_enc = *p++;
      else if (*a == 'L') p++;
      else if (*a != 'P' || !read_enc(&p, data_end, (uint8_t)(*p++ & 0x7f), 0, &skip)) break;
    }
    p = data_end;
    for (const uint8_t *a = aug + 1; *a; a++) ci->signal |= *a == 'S';
  }
  ci->ins = p;
  ci->end = end;
  return p <= end;
}

static void set_reg(cfs_t *s, const cie_t *ci, uint64_t reg, uint8_t how, int64_t off) {
  if (reg == REG_RBP) { s->rbp_how = how; s->rbp_off = off; }
  if (reg == ci->ra_reg) { s->ra_how = how; s->ra_off = off; }
}

/* Run the call-frame program [p, end) from location `loc` while it stays at or below
 * `target`, on state s (init: the state after the CIE's program, for DW_CFA_restore).
 * False at an instruction this walk does not follow. Its length: one switch, DWARF's. */
static bool cfi_run(const uint8_t *p, const uint8_t *end, const cie_t *ci, uintptr_t loc, uintptr_t target,
                    cfs_t *s, const cfs_t *init) {
  cfs_t saved[4];
  unsigned nsaved = 0;
  uintptr_t a;
  uint16_t u2;
  uint32_t u4;
  while (p < end) {
    uint8_t op = *p++, lo = op & 0x3f;
    uint64_t reg, delta = 0;
    switch (op) { /* one dispatch an instruction: the three packed kinds as ranges */
    case 0x40 ... 0x7f: delta = lo; goto advance;
    case 0x80 ... 0xbf: set_reg(s, ci, lo, HOW_AT, (int64_t)uleb(&p, end) * ci->data_align); break;
    case 0xc0 ... 0xff: if (!init) return false;
      set_reg(s, ci, lo, lo == REG_RBP ? init->rbp_how : init->ra_how, lo == REG_RBP ? init->rbp_off : init->ra_off);
      break;
    case 0x00: break;                                                    /* nop */
    case 0x01: if (!read_enc(&p, end, ci->fde_enc, 0, &a)) return false; /* set_loc */
      if (a > target) return true;
      loc = a;
      break;
    case 0x02: if (p == end) return false;
      delta = *p++;
      goto advance;
    case 0x03: if (end - p < 2) return false;
      __builtin_memcpy(&u2, p, 2); p += 2; delta = u2; goto advance;
    case 0x04: if (end - p < 4) return false;
      __builtin_memcpy(&u4, p, 4); p += 4; delta = u4; goto advance;
    case 0x05: reg = uleb(&p, end); set_reg(s, ci, reg, HOW_AT, (int64_t)uleb(&p, end) * ci->data_align); break;
    case 0x06: reg = uleb(&p, end); if (!init) return false;
      set_reg(s, ci, reg, reg == REG_RBP ? init->rbp_how : init->ra_how, reg == REG_RBP ? init->rbp_off : init->ra_off);
      break;
    case 0x07: set_reg(s, ci, uleb(&p, end), HOW_UNDEF, 0); break;
    case 0x08: set_reg(s, ci, uleb(&p, end), HOW_SAME, 0); break;
    case 0x09: reg = uleb(&p, end); (void)uleb(&p, end); set_reg(s, ci, reg, HOW_OTHER, 0); break;
    case 0x0a: if (nsaved == 4) return false; saved[nsaved++] = *s; break;
    case 0x0b: if (nsaved == 0) return false;
      *s = saved[--nsaved]; /* the CFA too: gcc's epilogues rely on it, as libgcc does */
      break;
    case 0x0c: s->cfa_reg = (uint8_t)uleb(&p, end); s->cfa_off = (int64_t)uleb(&p, end); break;
    case 0x0d: s->cfa_reg = (uint8_t)uleb(&p, end); break;
    case 0x0e: s->cfa_off = (int64_t)uleb(&p, end); break;
    case 0x10: case 0x16: reg = uleb(&p, end); p += uleb(&p, end); set_reg(s, ci, reg, HOW_OTHER, 0); break;
    case 0x11: reg = uleb(&p, end); set_reg(s, ci, reg, HOW_AT, sleb(&p, end) * ci->data_align); break;
    case 0x12: s->cfa_reg = (uint8_t)uleb(&p, end); s->cfa_off = sleb(&p, end) * ci->data_align; break;
    case 0x13: s->cfa_off = sleb(&p, end) * ci->data_align; break;
    case 0x14: reg = uleb(&p, end); (void)uleb(&p, end); set_reg(s, ci, reg, HOW_OTHER, 0); break;
    case 0x15: reg = uleb(&p, end); (void)sleb(&p, end); set_reg(s, ci, reg, HOW_OTHER, 0); break;
    case 0x2e: (void)uleb(&p, end); break;                               /* GNU_args_size */
    default: return false; /* def_cfa_expression and what no compiler emits for x86-64 */
    }
    continue;
  advance:
    if (loc + delta * ci->code_align > target) return true;
    loc += delta * ci->code_align;
  }
  return true;
}

/* The FDE of pc in the object whose .eh_frame_hdr is hdr (its binary search table), or NULL. */
static const uint8_t *fde_find(const uint8_t *hdr, uintptr_t pc) {
  const uint8_t *p = hdr + 4, *end = hdr + 64;
  uintptr_t ignored, count;
  if (hdr[0] != 1 || hdr[3] != 0x3b) return NULL; /* the table: datarel sdata4 pairs */
  if (!read_enc(&p, end, hdr[1], (uintptr_t)hdr, &ignored) || !read_enc(&p, end, hdr[2], (uintptr_t)hdr, &count))
    return NULL;
  const int32_t *t = (const int32_t *)(const void *)p;
  if (count == 0 || pc < (uintptr_t)hdr + t[0]) return NULL;
  size_t lo = 0, hi = count; /* t[2 lo] <= pc < t[2 hi] */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)hdr + t[2 * mid] <= pc) lo = mid;
    else hi = mid;
  }
  return hdr + t[2 * lo + 1];
}

/* The CIEs read so far, with the state after their initial instructions: an object has a
 * handful (gcc's, one with a personality routine, one for signal frames) shared by all its
 * FDEs. An entry is written once, by the thread that claims it, and published by its `at`
 * (release; a reader that sees its CIE's address there (acquire) reads the rest as
 * written), so no reader waits (S2); a claim lost to a fork leaves that entry unused. Like
 * the rule cache, entries are never dropped (see there for dlclose). */
#define CIE_MEMO 32u
typedef struct {
  const uint8_t *at;
  bool ok; /* parsed, and its initial instructions followed */
  cie_t ci;
  cfs_t init;
} cie_memo_t;
static cie_memo_t cie_memo[CIE_MEMO];
static uint8_t cie_claimed[CIE_MEMO];

/* The CIE at c and the state after its initial instructions: false when the walk cannot
 * follow it. */
static bool cie_get(const uint8_t *c, cie_t *ci, cfs_t *init) {
  uint32_t i = (uint32_t)(((uintptr_t)c >> 3) ^ ((uintptr_t)c >> 11)) & (CIE_MEMO - 1);
  cie_memo_t *m = &cie_memo[i];
  if (likely(__atomic_load_n(&m->at, __ATOMIC_ACQUIRE) == c)) {
    *ci = m->ci;
    *init = m->init;
    return m->ok;
  }
  *init = (cfs_t){.cfa_reg = REG_RSP};
  bool ok = cie_parse(c, ci) && cfi_run(ci->ins, ci->end, ci, 0, UINTPTR_MAX, init, NULL);
  uint8_t free_ = 0;
  if (__atomic_compare_exchange_n(&cie_claimed[i], &free_, 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    m->ok = ok;
    m->ci = *ci;
    m->init = *init;
    __atomic_store_n(&m->at, c, __ATOMIC_RELEASE);
  }
  return ok;
}

/* The rule of return address pc (the call is at pc - 1) from the unwind tables. */
static KITE_NOINLINE rule_t rule_lookup(uintptr_t pc) {
  rule_t r = {.kind = RULE_END};
  struct dl_find_object fo;
  if (_dl_find_object((void *)(pc - 1), &fo) != 0 || !fo.dlfo_eh_frame) return r; /* libgcc: the end too */
  const uint8_t *f = fde_find(fo.dlfo_eh_frame, pc - 1);
  if (!f) return r;
  uint32_t len;
  int32_t cie_off;
  __builtin_memcpy(&len, f, 4);
  __builtin_memcpy(&cie_off, f + 4, 4);
  r.kind = RULE_HARD;
  cie_t ci;
  cfs_t s, init;
  if (len == 0 || len == 0xffffffffu || !cie_get(f + 4 - cie_off, &ci, &init) || ci.signal) return r;
  const uint8_t *end = f + 4 + len, *p = f + 8;
  uintptr_t begin, range;
  if (!read_enc(&p, end, ci.fde_enc, 0, &begin) || !read_enc(&p, end, ci.fde_enc & 0x0f, 0, &range)) return r;
  if (pc - 1 < begin || pc - 1 - begin >= range) {
    r.kind = RULE_END;
    return r;
  }
  const uint8_t *ins = p;
  if (ci.z) ins += uleb(&ins, end); /* the FDE's augmentation data (an LSDA pointer) */
  s = init;
  if (!cfi_run(ins, end, &ci, begin, pc - 1, &s, &init)) return r;
  if (s.ra_how == HOW_UNDEF) {
    r.kind = RULE_END;
    return r;
  }
  if ((s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP) || s.ra_how != HOW_AT || s.ra_off != -8 ||
      (s.rbp_how != HOW_SAME && s.rbp_how != HOW_AT) || s.cfa_off <= 0 || s.cfa_off > INT32_MAX ||
      (s.rbp_how == HOW_AT && (s.rbp_off >= 0 || s.rbp_off < INT32_MIN)))
    return r;
  r = (rule_t){.kind = RULE_OK, .cfa_rbp = s.cfa_reg == REG_RBP, .cfa_off = (int32_t)s.cfa_off,
               .rbp_at = s.rbp_how == HOW_AT ? (int32_t)s.rbp_off : 0};
  return r;
}

/* ---- the cache of rules (S2) ---- */

/* One word a return address, so that a reader never sees half of another's entry: bits
 * 63..28 pc >> 12, 27..26 kind (0: empty), 25 cfa_rbp, 24..16 -rbp_at / 8, 15..0 cfa_off / 8.
 * The slot's index and pc >> 12 give back the whole pc. A rule that does not fit is not kept.
 * Entries are never dropped: code unloaded (dlclose) and other code loaded at its addresses
 * could be walked by stale rules, giving wrong frames (never a read outside S5's range). */
#define CACHE_SLOTS 4096u
static uint64_t rule_cache[CACHE_SLOTS];

static inline uint32_t cache_slot(uintptr_t pc) { return (uint32_t)((pc ^ (pc >> 12)) & (CACHE_SLOTS - 1)); }

static rule_t rule_get(uintptr_t pc) {
  uint64_t e = __atomic_load_n(&rule_cache[cache_slot(pc)], __ATOMIC_RELAXED);
  if (likely((e >> 28) == (uint64_t)(pc >> 12) && ((e >> 26) & 3) != 0))
    return (rule_t){.kind = (uint8_t)((e >> 26) & 3), .cfa_rbp = (uint8_t)((e >> 25) & 1),
                    .cfa_off = (int32_t)((e & 0xffff) * 8), .rbp_at = -(int32_t)(((e >> 16) & 0x1ff) * 8)};
  rule_t r = rule_lookup(pc);
  if (r.kind == RULE_NONE || (pc >> 48) != 0 || (r.cfa_off & 7) || r.cfa_off / 8 > 0xffff || (r.rbp_at & 7) ||
      -r.rbp_at / 8 > 0x1ff)
    return r;
  e = (uint64_t)(pc >> 12) << 28 | (uint64_t)r.kind << 26 | (uint64_t)r.cfa_rbp << 25 |
      (uint64_t)(-r.rbp_at / 8) << 16 | (uint64_t)(r.cfa_off / 8);
  __atomic_store_n(&rule_cache[cache_slot(pc)], e, __ATOMIC_RELAXED);
  return r;
}

/* ---- the thread's stack (S5) ---- */

extern void *__libc_stack_end; /* glibc: the main thread's stack pointer at its start */
#define STACK_SPAN ((uintptr_t)64 << 20) /* the deepest stack walked (bytes from its top) */
/* [known_lo, known_hi): part of this thread's stack found mapped, known_hi its top */
static __thread uintptr_t known_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t known_hi __attribute__((tls_model("initial-exec")));

/* The top of the stack that holds sp, with [sp, top) mapped: false when not known. A glibc
 * thread's descriptor (pthread_self) sits at the top of its stack's mapping, the main
 * thread's stack ends at __libc_stack_end; any other stack (one the program switched to)
 * is not known. The mapping is checked once a thread (mincore), and again as it deepens. */
static bool stack_bounds(uintptr_t sp, uintptr_t *hi) {
  uintptr_t top = (uintptr_t)pthread_self();
  if (!(sp < top && top - sp <= STACK_SPAN)) {
    top = (uintptr_t)__libc_stack_end;
    if (!(sp < top && top - sp <= STACK_SPAN)) return false;
  }
  if (known_hi != top || sp < known_lo) {
    uintptr_t up = known_hi == top ? known_lo : top;
    if (!_kite_os_mapped((void *)sp, up - sp)) return false;
    known_lo = sp & ~(uintptr_t)4095; /* (the whole page of sp is mapped) */
    known_hi = top;
  }
  *hi = top;
  return true;
}

/* One frame: from pc's frame (stack pointer *sp, frame pointer *bp) to its caller's, whose
 * return address goes to *pc. 1: stepped; 0: the stack ends here (an outermost frame, or
 * a CFA outside S5's range); -1: the frame needs libgcc's unwinder. */
static inline __attribute__((always_inline)) int step(uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, uintptr_t hi) {
  /* the rule, read from its cache word as it lies (an empty word never matches: pc >= 4096) */
  uint64_t e = __atomic_load_n(&rule_cache[cache_slot(*pc)], __ATOMIC_RELAXED);
  uintptr_t kind, off, back, base = *sp;
  /* a cached rsp-based rule needs no check below hi: its offset is a multiple of 8, at least
   * 8, and sp is 8-aligned (the walk starts from an aligned one and moves to checked CFAs) */
  bool checked = false;
  if (likely((e >> 28) == (uint64_t)(*pc >> 12))) {
    kind = (e >> 26) & 3;
    off = (uintptr_t)(e & 0xffff) << 3;
    back = (uintptr_t)((e >> 16) & 0x1ff) << 3;
    if (e & ((uint64_t)1 << 25)) base = *bp;
    else checked = true;
  } else {
    rule_t r = rule_get(*pc);
    kind = r.kind;
    off = (uintptr_t)(intptr_t)r.cfa_off;
    back = (uintptr_t)-(intptr_t)r.rbp_at;
    if (r.cfa_rbp) base = *bp;
  }
  if (kind != RULE_OK) return kind == RULE_END ? 0 : -1;
  uintptr_t cfa = base + off;
  if (cfa > hi || (!checked && (cfa < *sp + 8 || (cfa & 7)))) return 0; /* (the return address: [cfa - 8, cfa)) */
  if (back) {
    uintptr_t at = cfa - back;
    if (at < *sp) return 0;
    *bp = *(const uintptr_t *)at;
  }
  *pc = *(const uintptr_t *)(cfa - 8);
  *sp = cfa;
  return 1;
}

/* Walk from return address pc with the stack pointer sp and frame pointer bp it returns
 * to, the stack ending at hi, leaving out `skip` frames and then the frames in
 * [own_lo, own_hi) before the first one kept. False when a frame needs libgcc's unwinder
 * (RULE_HARD); a frame that leaves the stack (a corrupt one) ends the walk. Reads only
 * [sp, hi) (S5). A known return address costs one load of its cache word. */
static bool walk(kite_stack_t *st, uint32_t skip, uintptr_t own_lo, uintptr_t own_hi, uintptr_t pc, uintptr_t sp,
                 uintptr_t bp, uintptr_t hi) {
  uint32_t d = 0;
  int r = 1;
  /* the frames left out, then those kept: two loops, so the kept ones test neither */
  while (pc >= 4096 && (skip || pc - own_lo < own_hi - own_lo)) {
    skip -= skip != 0;
    if ((r = step(&pc, &sp, &bp, hi)) != 1) goto out;
  }
  while (pc >= 4096) {
    st->pc[d++] = (void *)pc;
    if (d == KITE_STACK_FRAMES || (r = step(&pc, &sp, &bp, hi)) != 1) break;
  }
out:
  st->depth = d;
  return r >= 0;
}
#endif /* STACK_WALK */

/* The stack from this function's caller on, leaving out `skip` of its frames (and, when
 * walked, the frames in [own_lo, own_hi) before the first kept). Its own frame has a frame
 * pointer (taking __builtin_frame_address(0) makes the compiler keep one), from which the
 * walk starts: the caller's pc, stack pointer and frame pointer. */
static KITE_NOINLINE void capture_from(kite_stack_t *st, uint32_t skip, uintptr_t own_lo, uintptr_t own_hi) {
  uintptr_t ra = (uintptr_t)__builtin_return_address(0);
#ifdef STACK_WALK
  const uintptr_t *fp = __builtin_frame_address(0);
  uintptr_t here = (uintptr_t)&ra, hi;
  if (stack_bounds(here, &hi) && (uintptr_t)fp >= here && (uintptr_t)fp + 16 <= hi && !((uintptr_t)fp & 7) &&
      fp[1] == ra && walk(st, skip, own_lo, own_hi, ra, (uintptr_t)(fp + 2), fp[0], hi))
    return;
#else
  (void)own_lo, (void)own_hi;
#endif
  __atomic_fetch_add(&_kite_stack_by_libgcc, 1, __ATOMIC_RELAXED);
  unwind_libgcc(st, skip, ra);
}

/* Both entry points: one capture at a time a thread (S1), errno kept. always_inline: the
 * frame capture_from starts from must be the entry point's own. */
static inline __attribute__((always_inline)) uint32_t capture(kite_stack_t *st, uint32_t skip, uintptr_t own_lo,
                                                               uintptr_t own_hi) {
  st->depth = 0;
  if (capturing || !unwind_works()) return 0;
  capturing = true;
  int saved = errno; /* the unwinder's lookups must not change what malloc's caller sees */
  capture_from(st, skip, own_lo, own_hi);
  errno = saved;
  capturing = false;
  return st->depth;
}

KITE_NOINLINE uint32_t _kite_stack_capture(kite_stack_t *st, uint32_t skip) {
  st->tid = _kite_os_thread_id();
  return capture(st, skip + 1, 0, 0); /* + 1: this function's own frame */
}

/* The address range of kite's own code when kite is a shared object (libkite.so, loaded
 * or preloaded); lo == hi when it is linked into the program, whose frames then cannot be
 * told from kite's by their object. Found once (lock-free _dl_find_object). */
static uintptr_t own_lo, own_hi;
static int own_state; /* 0: not looked yet, 1: looked */
static void own_range(void) {
  if (__atomic_load_n(&own_state, __ATOMIC_ACQUIRE)) return;
#ifdef STACK_FIND_OBJECT
  struct dl_find_object fo;
  if (_dl_find_object((void *)(uintptr_t)own_range, &fo) == 0 && fo.dlfo_link_map && fo.dlfo_link_map->l_name &&
      fo.dlfo_link_map->l_name[0]) {
    own_lo = (uintptr_t)fo.dlfo_map_start;
    own_hi = (uintptr_t)fo.dlfo_map_end;
  }
#endif
  __atomic_store_n(&own_state, 1, __ATOMIC_RELEASE);
}

KITE_NOINLINE uint32_t _kite_stack_capture_caller(kite_stack_t *st) {
  st->tid = 0; /* (the profiler has no use for it: no system call) */
  own_range();
  if (!capture(st, 1, own_lo, own_hi)) return 0; /* 1: this function's own frame */
  uint32_t k = 0; /* (libgcc's unwinder kept kite's frames: left out here) */
  while (k < st->depth && (uintptr_t)st->pc[k] - own_lo < own_hi - own_lo) k++;
  if (k) {
    for (uint32_t i = k; i < st->depth; i++) st->pc[i - k] = st->pc[i];
    st->depth -= k;
  }
  return st->depth;
}

#ifdef KITE_TEST_HOOKS
KITE_NOINLINE uint32_t _kite_stack_capture_libgcc(kite_stack_t *st, uint32_t skip) {
  st->tid = 0;
  if (!unwind_works()) return st->depth = 0;
  unwind_libgcc(st, skip, (uintptr_t)__builtin_return_address(0));
  return st->depth;
}

bool _kite_stack_walk_test(kite_stack_t *st, uintptr_t pc, uintptr_t sp, uintptr_t bp, uintptr_t hi) {
  st->depth = 0;
#ifdef STACK_WALK
  return walk(st, 0, 0, 0, pc, sp, bp, hi);
#else
  (void)pc, (void)sp, (void)bp, (void)hi;
  return false;
#endif
}
#endif

extern char *program_invocation_name; /* glibc: argv[0] */

void _kite_stack_print(kite_out_t *o, const kite_stack_t *st) {
  for (uint32_t i = 0; i < st->depth; i++) {
    uintptr_t pc = (uintptr_t)st->pc[i];
    _kite_out_str(o, "    #");
    _kite_out_u64(o, i);
    _kite_out_str(o, " ");
    _kite_out_hex(o, pc);
#ifdef STACK_FIND_OBJECT
    struct dl_find_object fo;
    /* pc - 1: a return address past the end of its function (a noreturn call) still
     * belongs to the object of the call */
    if (_dl_find_object((void *)(pc - 1), &fo) == 0 && fo.dlfo_link_map) {
      const char *name = fo.dlfo_link_map->l_name;
      if (!name || !*name) name = program_invocation_name ? program_invocation_name : "(program)";
      _kite_out_str(o, " ");
      _kite_out_str(o, name);
      _kite_out_str(o, "+");
      _kite_out_hex(o, pc - fo.dlfo_link_map->l_addr);
    }
#endif
    _kite_out_str(o, "\n");
  }
}
