/* src/secure.h -- what the secure build's two entry files share (the secure build only):
 * secure.c (errors, small blocks: canary, zeroing, quarantine; the kite_* wrappers) and
 * secure_large.c (guard pages after large runs and huge blocks, and the large runs a thread
 * keeps with their guards). Layer: entry. secure_layout.h has the block format and the
 * contract of the whole build.
 */
#ifndef KITE_SECURE_H
#define KITE_SECURE_H
#include "types.h"
#include "secure_layout.h"

#define KITE_SECURE_SMALL_LIMIT (KITE_SMALL_MAX - KITE_SECURE_CANARY) /* largest request with a canary */
#define KITE_SECURE_PAGE_DOWN(x) ((x) & ~(size_t)(KITE_OS_PAGE - 1))

/* _kite_secure_error never returns in a release build (it aborts), and gcc, seeing that,
 * calls it as a no-return function: never as the last jump of its caller, whose fast path
 * then keeps a stack frame for that call. Hiding that it never returns (noipa) lets the
 * callers (free, release) end in a jump to it, with no frame. */
/* "kite: secure: KIND: 0x..." on the process's stderr, then abort (a test build's
 * _kite_secure_error_hook, when set, is called instead and the operation skipped). */
KITE_COLD KITE_NO_IPA void _kite_secure_error(const char *kind, const void *p);

/* secure.c: the calling thread's heap (made now if it has none), which holds its quarantine
 * and kept runs (secure_layout.h); NULL while the thread exits (no heap would be retired
 * then) or when none can be made. errno untouched. */
struct kite_heap_s *_kite_secure_heap(void);

/* secure_large.c */
/* Bytes the user may use of large or huge block p (the guard starts there). */
size_t _kite_secure_guarded_usable(const void *p);
/* Is p the start of a live large run or huge block? */
bool _kite_secure_is_large(const void *p);
/* A large run or huge block for n bytes (aligned to align when not 0; zeroed when zero),
 * guard raised; NULL + ENOMEM. */
void *_kite_secure_large_alloc(size_t n, size_t align, bool zero);
/* p (a large run or huge block fresh from the core, or NULL) with its guard raised; NULL +
 * ENOMEM when the kernel refuses it (p then freed). */
void *_kite_secure_guarded(void *p);
/* Live large or huge block p's guard lifted (kite_heap_destroy frees it whole next). */
void _kite_secure_unguard(void *p);
/* free(p) that is not a small block (NULL included). */
KITE_NOINLINE void _kite_secure_free_other(void *p);
/* Thread heap h's kept large runs go back to the core (any thread: h's retirement). */
void _kite_secure_kept_flush(struct kite_heap_s *h);
/* A core "small" block no small page holds (the heap profiler's sampled block) made ready,
 * or reported; false: not handed out. */
KITE_COLD bool _kite_secure_sampled_ready(void *p);
#endif
