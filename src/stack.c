/* src/stack.c -- call stacks (contract and invariants S1-S3 in stack.h). */
#define _GNU_SOURCE
#include "stack.h"
#include "os.h"
#include <unwind.h>
#include <link.h>
#include <dlfcn.h>
#include <errno.h>

uint64_t _kite_stack_reentered;
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

typedef struct { kite_stack_t *st; uint32_t skip; } walk_t;

#ifdef STACK_UNWIND
static _Unwind_Reason_Code on_frame(struct _Unwind_Context *ctx, void *arg) {
  walk_t *w = arg;
  uintptr_t pc = _Unwind_GetIP(ctx);
  if (pc == 0) return _URC_END_OF_STACK;
  if (w->skip) { w->skip--; return _URC_NO_REASON; }
  w->st->pc[w->st->depth++] = (void *)pc;
  return w->st->depth == KITE_STACK_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}
#endif

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define STACK_FIND_OBJECT 1
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

/* noinline: its own frame is the one left out below, whoever inlines its callers */
KITE_NOINLINE uint32_t _kite_stack_capture(kite_stack_t *st, uint32_t skip) {
  st->depth = 0;
  st->tid = _kite_os_thread_id();
  if (capturing || !unwind_works()) return 0;
  capturing = true;
  int saved = errno; /* the unwinder's lookups must not change what malloc's caller sees */
  walk_t w = {st, skip + 1}; /* + 1: this function's own frame */
#ifdef STACK_UNWIND
  _Unwind_Backtrace(on_frame, &w);
#else
  (void)w;
#endif
  errno = saved;
  capturing = false;
  return st->depth;
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
  if (!_kite_stack_capture(st, 1)) return 0;
  own_range();
  uint32_t k = 0;
  while (k < st->depth && (uintptr_t)st->pc[k] - own_lo < own_hi - own_lo) k++;
  for (uint32_t i = k; i < st->depth; i++) st->pc[i - k] = st->pc[i];
  st->depth -= k;
  return st->depth;
}

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
