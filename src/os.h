/* src/os.h -- the platform contract. src/os/linux.c is the only file that makes system
 * calls. Every function leaves errno unchanged unless it says otherwise.
 *
 * Memory model: reserved memory is mapped read/write with MAP_NORESERVE, so "commit" is
 * the kernel's lazy page fault and costs nothing up front; decommit gives the pages back
 * (MADV_DONTNEED) and they read as zero afterwards.
 */
#ifndef KITE_OS_H
#define KITE_OS_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Read the platform's geometry once, before kite's first mapping (options.c's start-up calls
 * it): the OS page size (sysconf) into _kite_os_page_size (types.h), the transparent huge
 * page size (/sys/kernel/mm/transparent_hugepage/hpage_pmd_size). Returns the OS page size;
 * the caller refuses to start when it is above KITE_OS_PAGE_MAX (_kite_os_page_size then
 * stays at 4 KiB). Builds with KITE_OS_PAGE_CHECK (tests only) take the page size from
 * KITE_TEST_OS_PAGE when set (a power of two from the kernel's page up) and the huge page
 * size from KITE_TEST_HUGE_PAGE, map as a kernel of that page would (every mapping aligned to it), and abort with a message at any mmap,
 * munmap, mprotect, madvise, mincore or mremap range not aligned to it. */
size_t _kite_os_init(void);
/* The transparent huge page size kite advises for: 0 when there is none, or when it is larger
 * than an arena (KITE_ARENA_SIZE: a 64 KiB-page aarch64 kernel's 512 MiB), then
 * _kite_os_advise_huge and _kite_os_collapse_huge do nothing. */
size_t _kite_os_huge_page_size(void);
#ifdef KITE_OS_PAGE_CHECK
/* Ranges checked since start-up (tests: the check is not vacuous). */
extern uint64_t _kite_os_checked_ranges;
/* Tests: act as a kernel that takes MAP_FIXED_NOREPLACE for a hint (before 4.17; qemu-user
 * 7.2 over a range in use), placing the mapping elsewhere, off the forced page's alignment. */
extern bool _kite_test_os_noreplace_hint;
#endif

/* Sizes and addresses below are multiples of the OS page in force (KITE_OS_PAGE) unless said.
 * Map `size` bytes aligned to `align` (a power of two >= the OS page), read/write, zero filled.
 * `hint` (aligned, or NULL) is tried first. Returns NULL with errno = ENOMEM on failure. */
void *_kite_os_map_aligned(size_t size, size_t align, void *hint);
/* Map [p, p+size) read/write, zero filled, exactly there and only if nothing is mapped
 * there. false if it cannot (errno unchanged). */
bool _kite_os_map_at(void *p, size_t size);
/* The same, but charged to the kernel's commit limit (no MAP_NORESERVE): a size the machine
 * could never back is refused with ENOMEM, as glibc's malloc refuses it. For huge blocks. */
void *_kite_os_map_backed(size_t size, size_t align);
/* Unmap a range returned by _kite_os_map_aligned (or a page-aligned part of it). */
void _kite_os_unmap(void *p, size_t size);
/* Give the pages of [p, p+size) back to the OS; they read as zero afterwards. */
void _kite_os_decommit(void *p, size_t size);
/* Make [p, p+size) inaccessible (PROT_NONE: a guard page) or read/write again (p and size
 * inside a mapping of ours). false if the kernel refuses (errno unchanged). */
bool _kite_os_protect(void *p, size_t size, bool accessible);
/* Advise transparent huge pages for a range (best effort). */
void _kite_os_advise_huge(void *p, size_t size);
/* madvise(MADV_NOHUGEPAGE): no transparent huge pages there from now on. */
void _kite_os_advise_small(void *p, size_t size);
/* Are all the OS pages of [p, p+size) resident but at most max_missing? (mincore; size at
 * most 2 MiB, a multiple of the OS page); false when the kernel will not say. */
bool _kite_os_resident_whole(void *p, size_t size, uint32_t max_missing);
/* Is every page of [p, p+size) mapped? (mincore). No allocation, errno kept. */
bool _kite_os_mapped(void *p, size_t size);
/* Rebuild [p, p+size) (2 MiB aligned) on transparent huge pages now (MADV_COLLAPSE: the
 * resident pages are copied, the missing ones zero filled); false if the kernel cannot. */
bool _kite_os_collapse_huge(void *p, size_t size);
/* Write all of buf to fd (best effort, no allocation). */
void _kite_os_write(int fd, const char *buf, size_t len);
/* dup(fd) with close-on-exec, at a high number (>= 100) so the program's own fd numbering
 * is not disturbed; -1 on failure. */
int _kite_os_dup_cloexec(int fd);
/* Fill buf with n random bytes from the kernel (getrandom); falls back to a mix of clocks
 * and addresses when the kernel has none to give. */
void _kite_os_random(void *buf, size_t n);
/* The process id (statistics say which process they describe). */
int _kite_os_getpid(void);
/* Identity (device, inode) of what fd refers to; false if fd is not open. */
bool _kite_os_fd_identity(int fd, uint64_t id[2]);
/* Open a file to read, or to write (created with mode 0644 or truncated), close-on-exec;
 * -1 with errno set on failure. For profiles (prof.h) and /proc files. */
int _kite_os_open(const char *path, bool for_writing);
/* Write all of buf to fd; false with errno set when the kernel refuses (ENOSPC, EIO...). */
bool _kite_os_write_all(int fd, const void *buf, size_t len);
/* read(2) (retried on EINTR): bytes read, 0 at the end, -1 with errno set. */
long _kite_os_read(int fd, void *buf, size_t len);
void _kite_os_close(int fd);
/* The path the running program was started from (the target of /proc/self/exe), NUL
 * ended in buf: its length, or 0 when it is not known or does not fit in cap - 1 bytes. */
size_t _kite_os_program_path(char *buf, size_t cap);
/* Monotonic milliseconds. */
uint64_t _kite_os_now_ms(void);
/* Gives the CPU to another thread (a wait for a short critical section elsewhere). */
void _kite_os_yield(void);
/* Sleeps while *word == val (checked atomically by the kernel), for at most ms
 * milliseconds or until _kite_os_wake(word); may return early (a signal, or by chance):
 * the caller looks at *word again. word is private to the process (futex). */
void _kite_os_wait(int *word, int val, uint32_t ms);
/* Wakes the thread sleeping in _kite_os_wait(word, ...), if there is one. */
void _kite_os_wake(int *word);
/* Terminate the process immediately (SIGABRT). */
void _kite_os_abort(void) __attribute__((noreturn));
/* Route SIGSEGV to fn(fault address) (installed once; later calls change nothing and return
 * true). fn returns false for a fault that is not its own, which goes on to the handler
 * installed before (or, if that was the default, kills the process as it would have). A
 * fault fn owns does not return from fn. false if the kernel refused the handler. */
bool _kite_os_catch_faults(bool (*fn)(void *addr));
/* A forked child's handler (init.c): an installation a thread of the parent had begun and
 * not finished at the fork is finished (the handler is in place) or begun again at the
 * child's next call. */
void _kite_os_faults_fork_child(void);
/* The calling thread's kernel id (gettid, asked once a thread and kept). */
uint32_t _kite_os_thread_id(void);
/* A forked child's handler (init.c): the calling thread, the child's only one, asks its id
 * again (it kept its parent thread's). A child that no fork handler runs in (a raw clone
 * or vfork) reports its parent thread's id until it execs. */
void _kite_os_thread_fork_child(void);
/* Grow or move a mapping (mremap); NULL if it cannot (errno unchanged). */
void *_kite_os_remap(void *p, size_t old_size, size_t new_size, bool may_move);
/* Move the mapping [p, p+old_size) to dest (a range of new_size bytes the caller mapped, which
 * it replaces), growing it to new_size: the pages move, nothing is copied. false if it
 * cannot (then both mappings are as they were; errno unchanged). */
bool _kite_os_remap_to(void *p, size_t old_size, size_t new_size, void *dest);
#endif
