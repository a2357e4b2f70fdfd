/* bench/workloads/replay.c -- an allocation trace replayed LOOPS times, allocator calls only.
 *
 *   kite-wl-replay [-h] [-l LOOPS] TRACE
 *
 * TRACE is a kite trace or a .script (docs/trace-format.md; parsed by lab/trace/trace_io.c
 * into mmap'd memory, not the process malloc's). The ops run in order against the process
 * malloc (malloc, calloc, posix_memalign, realloc, free), LOOPS times over; blocks still live
 * at the end of a loop are freed before the next. Nothing is timed per op (kite-replay does
 * that, and its clock and getrusage calls cost more than the allocator calls of a short
 * trace): the whole-process time is the allocator's plus a stamp per block.
 *
 * Self-check: every block carries a stamp (tag, size) checked before its free and before and
 * after its realloc (the first bytes must survive); the checksum folds the op kinds and
 * sizes, which depend only on the trace and LOOPS.
 */
#include "wl.h"
#include <sys/mman.h>
#include "trace_io.h"

typedef struct blk_s {
  void *p;
  uint64_t n;
  uint64_t tag;
} blk_t;

static const char usage[] =
    "usage: kite-wl-replay [-h] [-l LOOPS] TRACE\n"
    "  Replays TRACE (kite trace or .script) LOOPS times against the process malloc, every\n"
    "  block stamped and checked. Default: -l 10.\n";

int main(int argc, char **argv) {
  long loops = 10;
  static const struct option longopts[] = {{"help", no_argument, NULL, 'h'},
                                            {"loops", required_argument, NULL, 'l'},
                                            {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "hl:", longopts, NULL)) != -1) {
    switch (c) {
      case 'h': fputs(usage, stdout); return 0;
      case 'l': loops = wl_parse_long(argv[0], 'l', optarg); break;
      default: fputs(usage, stderr); return 2;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "kite-wl-replay: one TRACE file wanted\n");
    fputs(usage, stderr);
    return 2;
  }
  kt_trace_t tr;
  char err[512];
  if (kt_parse_file(argv[optind], &tr, err, sizeof err) != 0) {
    fprintf(stderr, "kite-wl-replay: %s\n", err);
    return 64;
  }
  size_t bytes = (tr.n_slots + 1) * sizeof(blk_t);
  blk_t *b = (blk_t *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
  if (b == MAP_FAILED) wl_oom(bytes);
  uint64_t sum = 0, tagseq = 1;
  long bad = 0;
  double t0 = wl_now();
  for (long l = 0; l < loops; l++) {
    for (size_t i = 0; i < tr.n_ops; i++) {
      const kt_op_t *op = &tr.ops[i];
      blk_t *x = op->slot == KT_NO_SLOT ? NULL : &b[op->slot];
      uint64_t n = op->size;
      void *p = NULL;
      switch (op->kind) {
        case KT_MALLOC: p = malloc(n); break;
        case KT_CALLOC:
          p = calloc(op->align ? op->align : 1, op->align ? n / op->align : n);
          if (p && n && ((unsigned char *)p)[n - 1]) bad++;
          break;
        case KT_ALIGNED: {
          size_t a = op->align < sizeof(void *) ? sizeof(void *) : op->align;
          if (a & (a - 1)) a = sizeof(void *);
          if (posix_memalign(&p, a, n)) p = NULL;
          else if ((uintptr_t)p % a) bad++;
          break;
        }
        case KT_REALLOC: {
          blk_t *o = op->old_slot == KT_NO_SLOT ? NULL : &b[op->old_slot];
          void *q = o ? o->p : NULL;
          uint64_t keep = o ? (o->n < n ? o->n : n) : 0;
          if (o && !wl_stamp_ok(o->p, o->n, o->tag)) bad++;
          p = realloc(q, n);
          if (!p && n) wl_oom(n);
          if (keep >= 8) {
            uint64_t t;
            memcpy(&t, p, 8);
            if (t != o->tag) bad++;
          }
          if (o) o->p = NULL;
          break;
        }
        case KT_FREE:
          if (x) {
            if (!wl_stamp_ok(x->p, x->n, x->tag)) bad++;
            free(x->p);
            x->p = NULL;
          }
          sum = wl_mix(sum, 1);
          continue;
      }
      if (!p && n) wl_oom(n);
      x->p = p;
      x->n = n;
      x->tag = tagseq++;
      wl_stamp(p, n, x->tag);
      sum = wl_mix(sum, ((uint64_t)op->kind << 56) ^ n);
    }
    for (size_t s = 0; s < tr.n_slots; s++)
      if (b[s].p) {
        if (!wl_stamp_ok(b[s].p, b[s].n, b[s].tag)) bad++;
        free(b[s].p);
        b[s].p = NULL;
      }
  }
  double t1 = wl_now();
  printf("ops: %zu x %ld loops\n", tr.n_ops, loops);
  munmap(b, bytes);
  kt_trace_free(&tr);
  return wl_finish(t1 - t0, sum, bad, "blocks with a broken stamp");
}
