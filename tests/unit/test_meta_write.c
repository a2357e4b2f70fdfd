/* tests/unit/test_meta_write.c -- one arbitrary 8-byte write into a page descriptor
 * (kite-noover-debug, internals): what may malloc do next?
 *
 * For each of the 16 words of the descriptor of the page that serves malloc(32), a child
 * writes the address of a target (a static array) into that word and calls malloc(32)
 * twice. Allowed: a block inside the page (at most KITE_SMALL_PAGE_MAX past its first
 * byte), NULL, or the child stopped by kite (abort) or by a fault. Not allowed: any other
 * address (the target above all). The page's start is computed from the descriptor's
 * address, the index is bounded by capacity and the offset by the page size (types.h,
 * page.h, alloc.c). A second case writes an index past the carved blocks into the page's
 * free-list head: malloc must stop (a report and abort), not hand out what lies beyond.
 */
#define _GNU_SOURCE
#include "test.h"
#include <kite.h>
#include <signal.h>
#include <sys/wait.h>
#include "types.h"
#include "page.h"

static unsigned char target[1 << 20] __attribute__((aligned(1 << 20)));

/* In a child: the word w of pg's descriptor := v, then malloc(32) twice. Exit 0 when both
 * results are allowed, 1 otherwise. w < 0: pg->free := v instead, and only the carved
 * blocks are allowed (the block v would be is filled as a free one first, so that the
 * KITE_DEBUG=3 check of a block handed out does not stop the child in the bound's place). */
static void child(kite_page_t *pg, int w, uint64_t v) {
  uintptr_t lo = (uintptr_t)_kite_page_start(pg), hi = lo + KITE_SMALL_PAGE_MAX;
  if (w >= 0) {
    ((volatile uint64_t *)pg)[w] = v;
  } else {
    hi = lo + (uintptr_t)pg->capacity * pg->block_size;
    memset((void *)(lo + v * pg->block_size), KITE_FILL_FREE, pg->block_size);
    pg->free = (uint16_t)v;
  }
  for (int k = 0; k < 2; k++) {
    uintptr_t p = (uintptr_t)kite_malloc(32);
    if (p && (p < lo || p >= hi)) _exit(1);
  }
  _exit(0);
}

/* Run child(pg, w, v); returns how it ended: 0 allowed result, 1 a forbidden address, 2
 * stopped by a signal. */
static int run(kite_page_t *pg, int w, uint64_t v) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) child(pg, w, v);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
  if (WIFSIGNALED(st)) return 2;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static kite_page_t *page_of_32(void **keep) {
  *keep = kite_malloc(32); /* the current page of the class, with a free block after it */
  return *keep ? _kite_unit_of((uintptr_t)*keep) : NULL;
}

TEST(one_word) {
  void *keep;
  kite_page_t *pg = page_of_32(&keep);
  assert_true(pg != NULL);
  memset(target, KITE_FILL_FREE, sizeof target); /* KITE_DEBUG=3 checks a block it hands out */
  for (int w = 0; w < (int)(sizeof(kite_page_t) / 8); w++) {
    int r = run(pg, w, (uint64_t)(uintptr_t)target);
    if (r == 1) fprintf(stderr, "word %d of the descriptor steered malloc out of its page\n", w);
    expect_true(r != 1);
  }
  kite_free(keep);
}

TEST(index_past_capacity) {
  void *keep;
  kite_page_t *pg = page_of_32(&keep);
  assert_true(pg != NULL && pg->capacity < KITE_LINK_END - 1);
  fprintf(stderr, "(a report of a free list naming no carved block expected)\n");
  expect_int_eq(run(pg, -1, KITE_LINK_END - 1), 2);
  kite_free(keep);
}

int main(void) {
  RUN(one_word);
  RUN(index_past_capacity);
  return test_main_end();
}
