/* lab/trace/trace_io.h -- reading allocation traces into memory, for kite-replay and tests.
 *
 * Two text formats are read (docs/trace-format.md documents both):
 *   kite trace v1   header line "# kite-trace v1", then one op a line:
 *                     m ID SIZE TID          malloc
 *                     c ID N SIZE TID        calloc(N, SIZE)
 *                     a ID ALIGN SIZE TID    aligned allocation (posix_memalign, memalign ...)
 *                     r OLD NEW SIZE TID     realloc: block OLD becomes block NEW (NEW may equal OLD)
 *                     f ID TID               free
 *                   ID "-" in f/r OLD marks a pointer the trace never saw allocated (allocated
 *                   before tracing began): replay skips such a free and turns such a realloc
 *                   into a malloc.
 *   .script         the seed's format, no header: "a ID SIZE", "r ID SIZE", "f ID", with the
 *                   workshop's semantics: an id is a slot holding a pointer. "a" on a live id
 *                   leaves the old block allocated and unreachable (the id gets a fresh slot);
 *                   "f" on a NULL or never-used id is free(NULL); "r" on one is realloc(NULL).
 * Both: blank lines and lines starting with '#' are skipped; ids and sizes are non-negative
 * decimal integers; size 0 is allowed.
 *
 * The parser checks the whole trace before anything runs: every op well formed; in a kite
 * trace every id freed or reallocated is live and no id is allocated twice while live. The first problem is reported as
 * "FILE:LINE: message" and parsing stops.
 *
 * Ids are mapped to dense "slots" (one per distinct id), so the replay keeps its per-block state
 * in flat arrays. Invariant after a successful parse: replaying ops in order, an op that
 * allocates into slot s finds s dead, an op that frees or reallocates slot s finds s live.
 */
#ifndef KITE_LAB_TRACE_IO_H
#define KITE_LAB_TRACE_IO_H
#include <stddef.h>
#include <stdint.h>

enum kt_kind { KT_MALLOC, KT_CALLOC, KT_ALIGNED, KT_REALLOC, KT_FREE };
enum kt_format { KT_FORMAT_AUTO, KT_FORMAT_KITE, KT_FORMAT_SCRIPT };

#define KT_NO_SLOT UINT32_MAX
#define KT_OP_NULL 1

typedef struct kt_op_s {
  uint8_t kind;      /* enum kt_kind */
  uint8_t flags;     /* KT_OP_NULL: a .script op on a NULL slot (free(NULL), realloc(NULL, n)) */
  uint8_t pad_[2];
  uint32_t line;     /* 1-based physical line in the file */
  uint32_t slot;     /* slot produced (allocations, realloc NEW) or freed (free); KT_NO_SLOT for
                        a free of a foreign pointer */
  uint32_t old_slot; /* realloc: slot of OLD, KT_NO_SLOT if OLD was foreign ("-") */
  uint64_t size;     /* bytes requested (calloc: N * SIZE) */
  uint64_t align;    /* aligned: the alignment; calloc: N; otherwise 0 */
} kt_op_t;

typedef struct kt_trace_s {
  kt_op_t *ops;
  size_t n_ops;
  size_t n_slots;
  size_t n_lines;   /* physical lines in the file */
  int format;       /* KT_FORMAT_KITE or KT_FORMAT_SCRIPT */
} kt_trace_t;

/* Parse `len` bytes of `buf` (need not be NUL-terminated). `name` is used in messages.
 * format KT_FORMAT_AUTO sniffs the header. Returns 0, or -1 with "name:line: message" in
 * err (always NUL-terminated) and *out empty. */
int kt_parse_buffer(const char *buf, size_t len, const char *name, int format, kt_trace_t *out,
                    char *err, size_t errlen);

/* Read and parse a file. A path ending in ".script" is read as a .script; otherwise the
 * format is sniffed (a "# kite-trace" header or not). Returns 0 or -1 with err set. */
int kt_parse_file(const char *path, kt_trace_t *out, char *err, size_t errlen);

/* Release a parsed trace (its memory is mmap'd, never the process malloc's). */
void kt_trace_free(kt_trace_t *t);

#endif
