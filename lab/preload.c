/* lab/preload.c -- libkite-lab.so: a whole program's malloc family served by one lab policy.
 *
 *   LD_PRELOAD=build/libkite-lab.so KITE_LAB_POLICY=rbtree_clrs PROGRAM ...
 *
 * KITE_LAB_POLICY names any policy of the registry (default: seglist); an unknown name prints
 * the valid names on stderr and exits with status 2. KITE_LAB_HEAP=SIZE[K|M|G] sets the size
 * of the heap reservation (default 64G; tests use a small one to reach exhaustion).
 *
 * Design:
 *   - The heap is one reservation made on first use: mmap of 64 GiB or KITE_LAB_HEAP (halving
 *     down to 256 MiB if the system refuses), PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,
 *     so pages are touched only as blocks are used. The policy's init() gets all of it; when
 *     the policy runs out it returns NULL and we set errno = ENOMEM.
 *   - One global pthread mutex serialises every call (the policies are single-threaded); fork
 *     handlers take it before fork and release it in both processes, so a child never inherits
 *     a heap in the middle of an update.
 *   - Aligned requests beyond the policy's alignment over-allocate n + alignment bytes and
 *     return the first aligned address at least 16 bytes into the block. The two words before
 *     it hold a marker: [MAGIC ^ address][address of the real block]. free/realloc/
 *     malloc_usable_size recognise the marker (the second word is then a heap address below
 *     the pointer, which no policy header can be: headers hold sizes < the heap size, far below
 *     any mmap address) and act on the real block.
 *   - Plain blocks are 16-aligned: a policy with the seed's 8-byte granule (hwx, seglist, the
 *     trees) serves them through the aligned path above.
 *   - Pointers outside the reservation (there should be none) are ignored by free.
 *   - Setup never allocates: getenv, write(2) and mmap only.
 *   - Built with -fno-builtin: the compiler must not turn malloc+memset into a call to calloc
 *     (or any such rewrite) inside the allocator itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h> /* the prototypes we define must match glibc's */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "policy.h"

#define LAB_PRELOAD_RESERVE ((size_t)64 << 30)
#define LAB_PRELOAD_MIN_RESERVE ((size_t)256 << 20)
#define LAB_ALIGN_MAGIC ((uintptr_t)0x6b6974656c61622bull)

static pthread_mutex_t lab_lock = PTHREAD_MUTEX_INITIALIZER;
static const lab_policy_t *lab_pol;
static char *lab_region;
static size_t lab_region_size;

static void lab_say(const char *s) {
  size_t n = strlen(s);
  while (n) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w, n -= (size_t)w;
  }
}

/* KITE_LAB_HEAP: a byte count with an optional K, M or G suffix; 0 when absent or malformed.
 * (Parsed by hand: strtoull may allocate for locale data.) */
static size_t lab_heap_env(void) {
  const char *s = getenv("KITE_LAB_HEAP");
  if (!s || !*s) return 0;
  size_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (SIZE_MAX - 9) / 10) return 0;
    v = v * 10 + (size_t)(*s - '0');
  }
  unsigned shift = 0;
  if (*s == 'K' || *s == 'k') shift = 10, s++;
  else if (*s == 'M' || *s == 'm') shift = 20, s++;
  else if (*s == 'G' || *s == 'g') shift = 30, s++;
  if (*s || v > (SIZE_MAX >> shift)) return 0;
  return v << shift;
}

/* Choose the policy and reserve the heap. Called with lab_lock held, once. */
static void __attribute__((noinline, cold)) lab_setup_generic(void) {
  const char *name = getenv("KITE_LAB_POLICY");
  if (!name || !*name) name = "seglist";
  const lab_policy_t *pol = lab_policy_find(name);
  if (!pol) {
    lab_say("libkite-lab: unknown KITE_LAB_POLICY '");
    lab_say(name);
    lab_say("'; valid names:");
    for (const lab_policy_t *const *p = lab_policies(); *p; p++) {
      lab_say(" ");
      lab_say((*p)->name);
    }
    lab_say("\n");
    _exit(2);
  }
  size_t want = lab_heap_env();
  size_t least = want && want < LAB_PRELOAD_MIN_RESERVE ? want : LAB_PRELOAD_MIN_RESERVE;
  for (size_t size = want ? want : LAB_PRELOAD_RESERVE; size >= least; size /= 2) {
    void *r = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r != MAP_FAILED) {
      lab_region = r;
      lab_region_size = size;
      break;
    }
  }
  if (!lab_region || !pol->init(lab_region, lab_region_size)) {
    lab_say("libkite-lab: cannot reserve the heap\n");
    _exit(2);
  }
  lab_pol = pol;
}

static inline void lab_enter(void) {
  pthread_mutex_lock(&lab_lock);
  if (__builtin_expect(lab_pol == NULL, 0)) lab_setup_generic();
}
static inline void lab_leave(void) { pthread_mutex_unlock(&lab_lock); }

static void lab_atfork_prepare(void) { pthread_mutex_lock(&lab_lock); }
static void lab_atfork_release(void) { pthread_mutex_unlock(&lab_lock); }

__attribute__((constructor)) static void lab_preload_ctor(void) {
  pthread_atfork(lab_atfork_prepare, lab_atfork_release, lab_atfork_release);
}

static inline bool lab_in_heap(const void *p) {
  return (const char *)p >= lab_region && (const char *)p < lab_region + lab_region_size;
}

/* The real block behind an aligned pointer q, or NULL when q is a plain block. */
static inline char *lab_aligned_base(void *q) {
  const uintptr_t *w = (const uintptr_t *)q;
  uintptr_t base = w[-1];
  if (base < (uintptr_t)lab_region || base >= (uintptr_t)q) return NULL;
  if (w[-2] != (LAB_ALIGN_MAGIC ^ (uintptr_t)q)) return NULL;
  return (char *)base;
}

/* Contract: lab_lock held. NULL + nothing changed when the heap is exhausted. */
static void *lab_aligned_locked(size_t alignment, size_t n) {
  if (alignment <= lab_pol->alignment) return lab_pol->malloc(n);
  /* q - p <= 16 + alignment - the policy's alignment */
  size_t extra = alignment + 16 - (lab_pol->alignment < 16 ? lab_pol->alignment : 16);
  if (n > SIZE_MAX - extra) return NULL;
  char *p = lab_pol->malloc(n + extra);
  if (!p || ((uintptr_t)p & (alignment - 1)) == 0) return p;
  uintptr_t q = ((uintptr_t)p + 16 + alignment - 1) & ~(uintptr_t)(alignment - 1);
  uintptr_t *w = (uintptr_t *)q;
  w[-2] = LAB_ALIGN_MAGIC ^ q;
  w[-1] = (uintptr_t)p;
  return (void *)q;
}

/* A plain block: 16-aligned as C's max_align_t asks, also from the policies that keep the
 * seed's 8-byte granule (their misaligned blocks get the aligned-block marker). */
static inline void *lab_plain_locked(size_t n) {
  return lab_pol->alignment >= 16 ? lab_pol->malloc(n) : lab_aligned_locked(16, n);
}

static void lab_free_locked(void *p) {
  char *base = lab_aligned_base(p);
  if (base) {
    ((uintptr_t *)p)[-2] = 0; /* a stale marker must not outlive the block */
    p = base;
  }
  lab_pol->free(p);
}

static size_t lab_usable_locked(void *p) {
  char *base = lab_aligned_base(p);
  if (base) return lab_pol->usable_size(base) - (size_t)((char *)p - base);
  return lab_pol->usable_size(p);
}

void *malloc(size_t n) {
  lab_enter();
  void *p = lab_plain_locked(n);
  lab_leave();
  if (!p) errno = ENOMEM;
  return p;
}

void free(void *p) {
  if (!p) return;
  int saved = errno;
  lab_enter();
  if (lab_in_heap(p)) lab_free_locked(p);
  lab_leave();
  errno = saved;
}

void *calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  lab_enter();
  void *p = lab_plain_locked(n);
  lab_leave();
  if (!p) errno = ENOMEM;
  else memset(p, 0, n);
  return p;
}

void *realloc(void *p, size_t n) {
  if (!p) return malloc(n);
  lab_enter();
  void *q;
  if (!lab_in_heap(p)) {
    q = NULL;
  } else if (lab_aligned_base(p)) {
    /* an aligned block: move it to a plain one, as glibc does */
    if (n == 0) {
      lab_free_locked(p);
      lab_leave();
      return NULL;
    }
    size_t old = lab_usable_locked(p);
    q = lab_plain_locked(n);
    if (q) {
      memcpy(q, p, old < n ? old : n);
      lab_free_locked(p);
    }
  } else {
    q = lab_pol->realloc(p, n);
    if (!q && n == 0) {
      lab_leave();
      return NULL;
    }
    if (q && ((uintptr_t)q & 15)) { /* an 8-granule policy moved it off 16: re-place it */
      void *r = lab_aligned_locked(16, n);
      if (r) { /* out of memory: keep the 8-aligned block rather than lose it */
        memcpy(r, q, n);
        lab_pol->free(q);
        q = r;
      }
    }
  }
  lab_leave();
  if (!q) errno = ENOMEM;
  return q;
}

void *reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, n);
}

static void *lab_aligned(size_t alignment, size_t n) {
  lab_enter();
  void *p = lab_aligned_locked(alignment, n);
  lab_leave();
  if (!p) errno = ENOMEM;
  return p;
}

static inline bool lab_pow2(size_t a) { return a && (a & (a - 1)) == 0; }

int posix_memalign(void **out, size_t alignment, size_t n) {
  if (!lab_pow2(alignment) || alignment % sizeof(void *)) return EINVAL;
  int saved = errno;
  void *p = lab_aligned(alignment, n);
  errno = saved;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t n) {
  if (!lab_pow2(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return lab_aligned(alignment, n);
}

void *memalign(size_t alignment, size_t n) {
  if (alignment > ((size_t)1 << 62)) {
    errno = EINVAL;
    return NULL;
  }
  while (!lab_pow2(alignment)) alignment = alignment ? (alignment | (alignment - 1)) + 1 : 1;
  return lab_aligned(alignment, n);
}

void *valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }

void *pvalloc(size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (n > SIZE_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  return memalign(page, n ? (n + page - 1) & ~(page - 1) : page);
}

size_t malloc_usable_size(void *p) {
  if (!p) return 0;
  lab_enter();
  size_t n = lab_in_heap(p) ? lab_usable_locked(p) : 0;
  lab_leave();
  return n;
}
