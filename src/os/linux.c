/* src/os/linux.c -- every system call kite makes (see src/os.h for the contract).
 *
 * Aligned mappings: try the hint first (MAP_FIXED_NOREPLACE-free: a plain hint, accepted
 * only if the kernel returned exactly it), then map size + align and trim both ends. Under
 * a tight RLIMIT_AS the over-sized map may fail where an exact one would not, so the next
 * attempts map exactly `size`: where the kernel puts it if that is aligned, else at the
 * aligned addresses next to it. The kernel puts it in the highest gap that holds `size`,
 * which may hold no aligned placement while a lower gap does: the last attempt reads the
 * gaps from /proc/self/maps (map_in_gap). Nothing is ever reserved beyond `size`.
 */
#define _GNU_SOURCE
#include "../os.h"
#include "../types.h"
#include "../once.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* ---- the platform's geometry (os.h: _kite_os_init) ---- */
size_t _kite_os_page_size = 4096;
static size_t kernel_page = 4096; /* sysconf's; below _kite_os_page_size only when forced */
static size_t huge_page;          /* 0: no huge-page advice */

/* A decimal number from a file (sysfs), 0 if none; no allocation. */
static size_t read_number(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  size_t v = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
    v = v * 10 + (size_t)(buf[i] - '0');
  return v;
}

static bool pow2(size_t v) { return v && !(v & (v - 1)); }

size_t _kite_os_init(void) {
  int saved = errno;
  long ps = sysconf(_SC_PAGESIZE);
  size_t page = ps > 0 && pow2((size_t)ps) ? (size_t)ps : 4096;
  kernel_page = page;
#ifdef KITE_OS_PAGE_CHECK
  const char *forced = getenv("KITE_TEST_OS_PAGE");
  if (forced && *forced) {
    size_t v = (size_t)strtoul(forced, NULL, 0);
    if (pow2(v) && v >= kernel_page) page = v;
  }
#endif
  if (page <= KITE_OS_PAGE_MAX) _kite_os_page_size = page;
  size_t h = read_number("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
#ifdef KITE_OS_PAGE_CHECK
  const char *forced_huge = getenv("KITE_TEST_HUGE_PAGE");
  if (forced_huge && *forced_huge) h = (size_t)strtoull(forced_huge, NULL, 0);
#endif
  huge_page = pow2(h) && h > page && h <= KITE_ARENA_SIZE ? h : 0;
  errno = saved;
  return page;
}

size_t _kite_os_huge_page_size(void) { return huge_page; }

/* ---- the alignment check of test builds (KITE_OS_PAGE_CHECK) ---- */
#ifdef KITE_OS_PAGE_CHECK
uint64_t _kite_os_checked_ranges;
static void put_hex(char **o, uint64_t v) {
  char t[16];
  int n = 0;
  do t[n++] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
  *(*o)++ = '0';
  *(*o)++ = 'x';
  while (n) *(*o)++ = t[--n];
}
static void check_range(const char *op, const void *p, size_t size) {
  __atomic_fetch_add(&_kite_os_checked_ranges, 1, __ATOMIC_RELAXED);
  size_t m = _kite_os_page_size - 1;
  if (((uintptr_t)p & m) == 0 && (size & m) == 0) return;
  char msg[160], *o = msg;
  for (const char *s = "kite: misaligned "; *s; ) *o++ = *s++;
  for (const char *s = op; *s; ) *o++ = *s++;
  *o++ = '(';
  put_hex(&o, (uintptr_t)p);
  *o++ = ',';
  *o++ = ' ';
  put_hex(&o, size);
  for (const char *s = ") for the OS page "; *s; ) *o++ = *s++;
  put_hex(&o, _kite_os_page_size);
  *o++ = '\n';
  _kite_os_write(2, msg, (size_t)(o - msg));
  _kite_os_abort();
}
#define CHECK_RANGE(op, p, size) check_range(op, p, size)
#else
#define CHECK_RANGE(op, p, size) ((void)0)
#endif

static void os_munmap(void *p, size_t size) {
  CHECK_RANGE("munmap", p, size);
  munmap(p, size);
}

static void *os_mmap_raw(void *hint, size_t size, int extra_flags) {
  CHECK_RANGE("mmap", hint, size);
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags,
                 -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

#ifdef KITE_OS_PAGE_CHECK
bool _kite_test_os_noreplace_hint;
/* A kernel that takes MAP_FIXED_NOREPLACE for a hint, as the test asks: map size at p if it
 * is free, else elsewhere at the kernel's page alignment but not the forced page's (where
 * the kernel put it when it is aligned by chance: one kernel page further). */
static void *mmap_hint_instead(void *p, size_t size, int flags) {
  uint8_t *q = mmap(p, size + kernel_page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (q == MAP_FAILED) return MAP_FAILED;
  bool skip = q != p && ((uintptr_t)q & (_kite_os_page_size - 1)) == 0;
  munmap(skip ? q : q + size, kernel_page);
  return skip ? q + kernel_page : q;
}
#endif

/* Map exactly [p, p+size) if nothing is mapped there, else NULL (errno set). A kernel before
 * 4.17, and qemu-user 7.2 over a range in use, take MAP_FIXED_NOREPLACE for a hint and map
 * elsewhere: that mapping is undone as the kernel made it, by the unchecked munmap (at a
 * forced page it is aligned only to the kernel's page; at a real one, to the page). */
static void *os_mmap_exact(void *p, size_t size, int extra_flags) {
  CHECK_RANGE("mmap", p, size);
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | extra_flags;
  void *q;
#ifdef KITE_OS_PAGE_CHECK
  if (_kite_test_os_noreplace_hint) q = mmap_hint_instead(p, size, extra_flags);
  else
#endif
  q = mmap(p, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (q == MAP_FAILED) return NULL;
  if (q == p) return q;
  munmap(q, size);
  errno = EEXIST;
  return NULL;
}

/* A mapping where a kernel of the page in force would put one: aligned to that page. (Only a
 * forced page, in test builds, is larger than the kernel's: then map more and trim.) */
static void *os_mmap(void *hint, size_t size, int extra_flags) {
  size_t extra = _kite_os_page_size - kernel_page;
  if (extra == 0) return os_mmap_raw(hint, size, extra_flags);
  uint8_t *q = mmap(hint, size + extra, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
  if (q == MAP_FAILED) return NULL;
  uint8_t *a =
      (uint8_t *)(((uintptr_t)q + _kite_os_page_size - 1) & ~(uintptr_t)(_kite_os_page_size - 1));
  if (a > q) munmap(q, (size_t)(a - q));
  if (q + size + extra > a + size) munmap(a + size, (size_t)(q + size + extra - (a + size)));
  return a;
}

static void *map_aligned(size_t size, size_t align, void *hint, int noreserve);
static void *map_in_gap(size_t size, size_t align, int noreserve);

void *_kite_os_map_aligned(size_t size, size_t align, void *hint) {
  return map_aligned(size, align, hint, MAP_NORESERVE);
}

void *_kite_os_map_backed(size_t size, size_t align) {
  return map_aligned(size, align, NULL, 0);
}

static void *map_aligned(size_t size, size_t align, void *hint, int noreserve) {
  int saved = errno;
  if (size == 0 || size + align < size) { errno = ENOMEM; return NULL; }
  if (hint) {
    void *p = os_mmap(hint, size, noreserve);
    if (p == hint) { errno = saved; return p; }
    if (p) os_munmap(p, size);
  }
  void *p = os_mmap(NULL, size + align, noreserve);
  if (p) {
    uintptr_t u = (uintptr_t)p, a = (u + align - 1) & ~(uintptr_t)(align - 1);
    if (a > u) os_munmap(p, a - u);
    size_t tail = (u + size + align) - (a + size);
    if (tail) os_munmap((void *)(a + size), tail);
    errno = saved;
    return (void *)a;
  }
  /* Tight address space: map exactly size, and if it is not aligned, retry at the aligned
   * addresses just below and just above it (often free: the kernel placed p there), then
   * in the gaps /proc/self/maps shows. */
  p = os_mmap(NULL, size, noreserve);
  if (p && ((uintptr_t)p & (align - 1)) == 0) { errno = saved; return p; }
  if (p) {
    uintptr_t u = (uintptr_t)p;
    os_munmap(p, size);
    uintptr_t tries[2] = {u & ~(uintptr_t)(align - 1), (u + align - 1) & ~(uintptr_t)(align - 1)};
    for (int i = 0; i < 2; i++) {
      if (tries[i] == 0) continue;
      void *q = os_mmap((void *)tries[i], size, noreserve);
      if (q == (void *)tries[i]) { errno = saved; return q; }
      if (q) os_munmap(q, size);
    }
    void *q = map_in_gap(size, align, noreserve);
    if (q) { errno = saved; return q; }
  } /* (no exact map at all: the limit or a full address space refuses size itself) */
  errno = ENOMEM;
  return NULL;
}

/* Parse "START-END ..." (hex) at s; false if the line does not start so. */
static bool maps_range(const char *s, const char *e, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t v[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    const char *start = s;
    for (; s < e; s++) {
      unsigned d = (unsigned)(*s >= '0' && *s <= '9' ? *s - '0'
                              : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : 16);
      if (d == 16) break;
      v[k] = v[k] << 4 | d;
    }
    if (s == start || s == e || *s != (k == 0 ? '-' : ' ')) return false;
    s++;
  }
  *lo = v[0];
  *hi = v[1];
  return true;
}

/* Map exactly size bytes, aligned, in a gap of the address space: the mappings of
 * /proc/self/maps (ascending) are read with a stack buffer (no allocation), the highest
 * aligned placement of each gap that holds one is kept (the last MAP_GAP_TRIES of them:
 * the highest gaps, as the kernel's own choice goes top-down), and they are tried from
 * the top with MAP_FIXED_NOREPLACE (a mapping made meanwhile by another thread makes one
 * fail, not overwritten). The gap under the stack is its room to grow and is skipped;
 * placements stay between 1 MiB and 2^KITE_ADDR_BITS (types.h: as the kernel's own choices
 * without a hint). NULL if no gap holds one, or /proc is not
 * mounted. */
#define MAP_GAP_TRIES 8
static void *map_in_gap(size_t size, size_t align, int noreserve) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  const uintptr_t floor = (uintptr_t)1 << 20, top = (uintptr_t)1 << KITE_ADDR_BITS;
  uintptr_t cand[MAP_GAP_TRIES];
  unsigned n = 0;
  uintptr_t prev_end = floor;
  char buf[4096];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
    char *line = buf, *end = buf + len, *nl;
    while ((nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
      uintptr_t lo, hi;
      if (maps_range(line, nl, &lo, &hi)) {
        /* the gap [prev_end, lo), capped to the user half; skipped under the stack */
        uintptr_t gap_hi = lo < top ? lo : top;
        bool stack = nl - line >= 7 && memcmp(nl - 7, "[stack]", 7) == 0;
        if (!stack && gap_hi > prev_end && gap_hi - prev_end >= size) {
          uintptr_t a = (gap_hi - size) & ~(uintptr_t)(align - 1);
          if (a >= prev_end) cand[n++ % MAP_GAP_TRIES] = a;
        }
        if (hi > prev_end) prev_end = hi;
      }
      line = nl + 1;
    }
    len = (size_t)(end - line);
    if (len == sizeof buf) len = 0; /* a line longer than the buffer: drop it */
    memmove(buf, line, len);
  }
  close(fd);
  for (unsigned i = 0; i < n && i < MAP_GAP_TRIES; i++) {
    uintptr_t a = cand[(n - 1 - i) % MAP_GAP_TRIES];
    void *q = os_mmap_exact((void *)a, size, noreserve);
    if (q) return q;
  }
  return NULL;
}

bool _kite_os_map_at(void *p, size_t size) {
  int saved = errno;
  void *q = os_mmap_exact(p, size, MAP_NORESERVE);
  errno = saved;
  return q == p;
}

void _kite_os_unmap(void *p, size_t size) {
  int saved = errno;
#ifdef __SANITIZE_ADDRESS__
  /* ASan keeps a range's shadow after munmap, and the ASan build poisons freed blocks
   * (tool.h): a range unmapped with freed blocks in it would read as poisoned wherever the
   * kernel maps something there next (a new thread's stack). Cleared one shadow page's
   * span at a time (a shadow byte covers 8 bytes: 32 KiB a 4 KiB page), only spans whose
   * shadow holds poison: those shadow pages are resident already, so clearing them costs
   * no memory, where clearing the whole range would fault in the shadow of clean spans. */
  const uintptr_t span = 8 * 4096;
  char *end = (char *)p + size;
  for (char *at = p; at < end;) {
    char *bad = __asan_region_is_poisoned(at, (size_t)(end - at));
    if (!bad) break;
    char *from = (char *)((uintptr_t)bad & ~(uintptr_t)7);
    char *stop = (char *)(((uintptr_t)bad | (span - 1)) + 1);
    if (from < at) from = at;
    if (stop > end) stop = end;
    ASAN_UNPOISON_MEMORY_REGION(from, (size_t)(stop - from));
    at = stop;
  }
#endif
  os_munmap(p, size);
  errno = saved;
}

/* madvise whose failure changes nothing kite relies on (a hint, or a decommit that leaves
 * the memory as it was); errno is kept. */
static void advise_keep_errno(void *p, size_t size, int advice) {
  CHECK_RANGE("madvise", p, size);
  int saved = errno;
  madvise(p, size, advice);
  errno = saved;
}

void _kite_os_decommit(void *p, size_t size) { advise_keep_errno(p, size, MADV_DONTNEED); }

void _kite_os_advise_huge(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
  if (huge_page) advise_keep_errno(p, size, MADV_HUGEPAGE);
#endif
}

void _kite_os_advise_small(void *p, size_t size) {
#ifdef MADV_NOHUGEPAGE
  advise_keep_errno(p, size, MADV_NOHUGEPAGE);
#endif
}

#ifdef KITE_TEST_HOOKS
uint64_t _kite_test_os_mincore_pages; /* tests: kernel pages asked of mincore by the check below */
#endif
/* Looks at the range in pieces of growing size, the first of 64 KiB (or one OS page if
 * larger), and stops at the first piece that takes the missing pages past max_missing: a
 * granule with a hole near its start costs the kernel a walk of 16 page-table entries
 * instead of 512, and one resident whole costs 6 calls instead of one. The answer is the
 * whole count's (resident kernel pages / kernel pages per OS page + max_missing >= the
 * range's OS pages), which is: missing kernel pages <= max_missing x kernel pages per OS
 * page. A piece the kernel will not say about counts as missing. */
bool _kite_os_resident_whole(void *p, size_t size, uint32_t max_missing) {
  CHECK_RANGE("mincore", p, size);
  unsigned char vec[512];
  size_t n = size / kernel_page; /* mincore counts the kernel's pages */
  if (n > sizeof vec) return false;
  size_t per = _kite_os_page_size / kernel_page;
  size_t allowed = (size_t)max_missing * per, missing = 0;
  size_t first = (size_t)65536 > _kite_os_page_size ? (size_t)65536 : _kite_os_page_size;
  size_t piece = first / kernel_page;
  int saved = errno;
  for (size_t done = 0; done < n && missing <= allowed; done += piece, piece *= 2) {
    if (piece > n - done) piece = n - done;
#ifdef KITE_TEST_HOOKS
    __atomic_fetch_add(&_kite_test_os_mincore_pages, piece, __ATOMIC_RELAXED);
#endif
    if (mincore((char *)p + done * kernel_page, piece * kernel_page, vec) != 0) {
      missing += piece; /* the kernel will not say: as if not resident */
      continue;
    }
    for (size_t i = 0; i < piece; i++) missing += !(vec[i] & 1);
  }
  errno = saved;
  return missing <= allowed;
}

bool _kite_os_mapped(void *p, size_t size) {
  unsigned char vec[1024];
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(kernel_page - 1); /* mincore's pages are the kernel's */
  size = (size + ((uintptr_t)p - a) + kernel_page - 1) & ~(kernel_page - 1);
  p = (void *)a;
  int saved = errno;
  bool ok = true;
  for (size_t done = 0; ok && done < size; done += sizeof vec * kernel_page) {
    size_t n = size - done < sizeof vec * kernel_page ? size - done : sizeof vec * kernel_page;
    ok = mincore((char *)p + done, n, vec) == 0; /* ENOMEM: a page of the range is not mapped */
  }
  errno = saved;
  return ok;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

bool _kite_os_collapse_huge(void *p, size_t size) {
  CHECK_RANGE("madvise", p, size);
  if (!huge_page) return false;
  int saved = errno;
  bool ok = madvise(p, size, MADV_COLLAPSE) == 0;
  errno = saved;
  return ok;
}

void _kite_os_write(int fd, const char *buf, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    buf += w;
    len -= (size_t)w;
  }
  errno = saved;
}

int _kite_os_open(const char *path, bool for_writing) {
  int flags = for_writing ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC : O_RDONLY | O_CLOEXEC;
  int fd;
  do fd = open(path, flags, 0644); while (fd < 0 && errno == EINTR);
  return fd;
}

size_t _kite_os_program_path(char *buf, size_t cap) {
  ssize_t n = cap > 1 ? readlink("/proc/self/exe", buf, cap - 1) : -1;
  if (n <= 0 || (size_t)n >= cap - 1) return 0; /* (a path of cap - 1 bytes may be cut) */
  buf[n] = 0;
  return (size_t)n;
}

bool _kite_os_write_all(int fd, const void *buf, size_t len) {
  const char *b = buf;
  while (len > 0) {
    ssize_t w = write(fd, b, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    len -= (size_t)w;
  }
  return true;
}

long _kite_os_read(int fd, void *buf, size_t len) {
  ssize_t r;
  do r = read(fd, buf, len); while (r < 0 && errno == EINTR);
  return (long)r;
}

void _kite_os_close(int fd) {
  int saved = errno;
  close(fd);
  errno = saved;
}

uint64_t _kite_os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void _kite_os_yield(void) { sched_yield(); }

/* (the futex operations' numbers, from the kernel's ABI: musl's headers have no
 * linux/futex.h) */
#define KITE_FUTEX_WAIT_PRIVATE 128
#define KITE_FUTEX_WAKE_PRIVATE 129

void _kite_os_wait(int *word, int val, uint32_t ms) {
  int saved = errno;
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  syscall(SYS_futex, word, KITE_FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0); /* (relative timeout) */
  errno = saved;
}

void _kite_os_wake(int *word) {
  int saved = errno;
  syscall(SYS_futex, word, KITE_FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = saved;
}

void _kite_os_abort(void) {
  raise(SIGABRT);
  _exit(134);
}

void *_kite_os_remap(void *p, size_t old_size, size_t new_size, bool may_move) {
  CHECK_RANGE("mremap", p, old_size);
  CHECK_RANGE("mremap", p, new_size);
  int saved = errno;
  void *q = mremap(p, old_size, new_size, may_move ? MREMAP_MAYMOVE : 0);
  errno = saved;
  return q == MAP_FAILED ? NULL : q;
}

bool _kite_os_protect(void *p, size_t size, bool accessible) {
  CHECK_RANGE("mprotect", p, size);
  int saved = errno;
  bool ok = mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
  errno = saved;
  return ok;
}

bool _kite_os_remap_to(void *p, size_t old_size, size_t new_size, void *dest) {
  CHECK_RANGE("mremap", p, old_size);
  CHECK_RANGE("mremap", dest, new_size);
  int saved = errno;
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
  errno = saved;
  return q == dest;
}

int _kite_os_getpid(void) { return (int)getpid(); }

int _kite_os_dup_cloexec(int fd) {
  int saved = errno;
  int r = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  errno = saved;
  return r;
}

void _kite_os_random(void *buf, size_t n) {
  int saved = errno;
  uint8_t *b = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(b + got, n - got, GRND_NONBLOCK);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got < n) { /* no entropy yet (early boot) or no getrandom: clocks and addresses */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts ^
                 ((uint64_t)(uintptr_t)buf << 17) ^ (uint64_t)getpid();
    for (; got < n; got++) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      b[got] ^= (uint8_t)(x >> 24);
    }
  }
  errno = saved;
}

bool _kite_os_fd_identity(int fd, uint64_t id[2]) {
  int saved = errno;
  struct stat st;
  bool ok = fstat(fd, &st) == 0;
  errno = saved;
  if (ok) { id[0] = (uint64_t)st.st_dev; id[1] = (uint64_t)st.st_ino; }
  return ok;
}

/* ---- faults (SIGSEGV) ----
 * One handler, installed by the first _kite_os_catch_faults; the handler that was there
 * before is kept and receives every fault fault_fn does not claim. Async-signal-safe: it
 * reads two variables written before the handler was installed (F1).
 *   F1 fault_fn and fault_prev are written before kite's handler is in place: the action
 *      before it is read first, and kite's installed by a second call. So a process that
 *      finds kite's handler in place, a child forked at any point of the installation
 *      included (with kite's fork handlers or without: once.h O5, O6), has the action to
 *      pass other faults on to. One call that installs and returns the old action writes
 *      that action back after the kernel's swap: a fork between the two left a child with
 *      kite's handler in place and nothing before it (its faults that are not kite's then
 *      killed it, whatever the program's handler). The bound: an action another thread
 *      sets between the two calls is the one kite's replaces, and it is written to
 *      fault_prev after the install; a child forked between the install and that write
 *      passes faults to the action before it. */
static bool (*fault_fn)(void *addr);
static struct sigaction fault_prev;
static kite_once_t fault_once; /* once.h: the installation (FAILED: the kernel refused it) */
#ifdef KITE_TEST_HOOKS
void (*_kite_test_hook_fault_installed)(void); /* tests: kite's handler just put in place */
#endif

static void fault_handler(int sig, siginfo_t *si, void *ctx) {
  if (fault_fn && fault_fn(si->si_addr)) return;
  if (fault_prev.sa_flags & SA_SIGINFO) {
    if (fault_prev.sa_sigaction) { fault_prev.sa_sigaction(sig, si, ctx); return; }
  } else if (fault_prev.sa_handler != SIG_DFL && fault_prev.sa_handler != SIG_IGN) {
    fault_prev.sa_handler(sig);
    return;
  }
  /* the default action (a fault cannot be ignored): back to SIG_DFL; returning re-runs the
   * faulting instruction, which now ends the process with SIGSEGV as it would have */
  struct sigaction dfl;
  sigemptyset(&dfl.sa_mask);
  dfl.sa_flags = 0;
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGSEGV, &dfl, NULL);
}

static bool fault_handler_in_place(void);

bool _kite_os_catch_faults(bool (*fn)(void *addr)) {
  if (!_kite_once_claim(&fault_once, _kite_os_getpid(), NULL))
    return _kite_once_done(&fault_once); /* installed, or refused */
  /* taken over from an ancestor's claimer that installed it (once.h O6) */
  if (fault_handler_in_place()) {
    _kite_once_end(&fault_once, true);
    return true;
  }
  int saved = errno;
  fault_fn = fn;
  struct sigaction sa, old;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sa.sa_sigaction = fault_handler;
  /* F1: the action before kite's first, then kite's in place */
  bool ok = sigaction(SIGSEGV, NULL, &fault_prev) == 0 && sigaction(SIGSEGV, &sa, &old) == 0;
#ifdef KITE_TEST_HOOKS
  if (ok && _kite_test_hook_fault_installed) _kite_test_hook_fault_installed();
#endif
  /* (the flags say whether sa_sigaction or sa_handler is the pointer: both compared) */
  if (ok && (old.sa_sigaction != fault_prev.sa_sigaction || old.sa_flags != fault_prev.sa_flags))
    fault_prev = old; /* set by another thread between the two calls (F1's bound) */
  errno = saved;
  _kite_once_end(&fault_once, ok);
  return ok;
}

/* Whether kite's handler is the one in place (a forked child's question, below). */
static bool fault_handler_in_place(void) {
  int saved = errno;
  struct sigaction cur;
  bool in = sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
            cur.sa_sigaction == fault_handler;
  errno = saved;
  return in;
}

/* Being installed in a forked child: the parent's thread that was installing does not exist
 * here, and the child's next call would wait for it for good (once.h O5). The handler in
 * place means its sigaction call was made (fault_fn was set before it): installed, never
 * again (a second installation would keep kite's own handler as the one before, which a
 * fault that is not kite's would then call for good); else the child's next call installs
 * it. */
void _kite_os_faults_fork_child(void) {
  _kite_once_fork_child(&fault_once, fault_handler_in_place);
}

#ifdef KITE_TEST_HOOKS
/* Tests: set the installation's state (1: as a thread of this process inside it; 0: as a
 * process that never installed it, whose fault_fn and fault_prev are empty), return the
 * word before. */
int _kite_test_faults_stage(int st) {
  if (st == KITE_ONCE_NONE) {
    fault_fn = NULL;
    memset(&fault_prev, 0, sizeof fault_prev);
  }
  return __atomic_exchange_n(&fault_once.state,
                             st == KITE_ONCE_BUSY ? _kite_once_busy_word(_kite_os_getpid()) : st,
                             __ATOMIC_ACQ_REL);
}
#endif

/* The thread's id, asked of the kernel once a thread (0: not asked yet; no thread has id 0).
 * A forked child's only thread inherits its parent thread's word: the fork hook clears it. */
static __thread uint32_t thread_id __attribute__((tls_model("initial-exec")));

uint32_t _kite_os_thread_id(void) {
  uint32_t t = thread_id;
  if (unlikely(t == 0)) thread_id = t = (uint32_t)syscall(SYS_gettid);
  return t;
}

void _kite_os_thread_fork_child(void) { thread_id = 0; }
