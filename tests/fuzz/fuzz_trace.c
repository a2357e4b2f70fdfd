/* tests/fuzz/fuzz_trace.c -- libFuzzer target: the trace parser (lab/trace/trace_io.h) fed
 * arbitrary bytes.
 *
 * Input: [selector u8] then the trace text. The selector picks the format argument (auto,
 * kite, script) and an error-buffer length. The text is passed in its own exact-size buffer
 * (no NUL after it), so ASan catches any read past the end. The parser must never crash and
 * must either
 *  - accept: format is kite or script (the forced one if forced); n_lines is the number of
 *    physical lines; ops have valid kinds, strictly increasing line numbers within
 *    [1, n_lines], slots below n_slots; replaying the ops, every allocation lands in a dead
 *    slot and every free/realloc names a live slot (or the foreign marker), calloc's size is
 *    N * SIZE with N in align; or
 *  - refuse: return -1 with an empty result and the message "NAME:LINE: text", LINE a
 *    physical line of the input; with a short error buffer the message is the same one,
 *    truncated and NUL-terminated.
 * Any violation aborts with a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "trace_io.h"

static unsigned char live[1 << 16];

FZ_NOCOV static void check_trace(const kt_trace_t *t, int format, const uint8_t *text, size_t len) {
  size_t lines = 0;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  if (len && text[len - 1] != '\n') lines++;
  fz_check(t->n_lines == lines, "n_lines %zu, text has %zu", t->n_lines, lines);
  fz_check(t->format == KT_FORMAT_KITE || t->format == KT_FORMAT_SCRIPT, "format %d", t->format);
  if (format != KT_FORMAT_AUTO)
    fz_check(t->format == format, "format %d forced %d", t->format, format);
  fz_check(t->n_ops <= lines, "%zu ops in %zu lines", t->n_ops, lines);
  fz_check(t->n_ops == 0 || t->ops != NULL, "ops NULL");
  /* each op is on its own non-blank line: at most one slot per line, so n_slots < 2^16 here */
  fz_check(t->n_slots <= t->n_ops && t->n_slots <= sizeof live, "%zu slots, %zu ops", t->n_slots,
           t->n_ops);
  memset(live, 0, t->n_slots);
  uint32_t prev_line = 0;
  for (size_t i = 0; i < t->n_ops; i++) {
    const kt_op_t *op = &t->ops[i];
    fz_check(op->line > prev_line && op->line <= lines, "op %zu line %u (previous %u, %zu lines)",
             i, op->line, prev_line, lines);
    prev_line = op->line;
    switch (op->kind) {
    case KT_CALLOC:
      fz_check(op->align == 0 ? op->size == 0 : op->size / op->align * op->align == op->size,
               "line %u: calloc size %llu not a multiple of N %llu", op->line,
               (unsigned long long)op->size, (unsigned long long)op->align);
      /* fall through */
    case KT_MALLOC:
    case KT_ALIGNED:
      fz_check(op->slot < t->n_slots && !live[op->slot], "line %u: allocation into slot %u",
               op->line, op->slot);
      live[op->slot] = 1;
      break;
    case KT_REALLOC:
      if (op->old_slot != KT_NO_SLOT) {
        fz_check(op->old_slot < t->n_slots && live[op->old_slot], "line %u: realloc of slot %u",
                 op->line, op->old_slot);
        live[op->old_slot] = 0;
      }
      fz_check(op->slot < t->n_slots && !live[op->slot], "line %u: realloc into slot %u",
               op->line, op->slot);
      live[op->slot] = 1;
      break;
    case KT_FREE:
      if (op->slot == KT_NO_SLOT) break;
      fz_check(op->slot < t->n_slots && live[op->slot], "line %u: free of slot %u", op->line,
               op->slot);
      live[op->slot] = 0;
      break;
    default:
      fz_check(0, "op %zu: kind %u", i, op->kind);
    }
  }
}

/* "t:LINE: message", LINE in [1, lines] (lines: physical lines of the input). */
FZ_NOCOV static void check_error(const char *err, const uint8_t *text, size_t len) {
  size_t lines = 0;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  if (len && text[len - 1] != '\n') lines++;
  fz_check(strncmp(err, "t:", 2) == 0, "error without the name: \"%s\"", err);
  char *e;
  unsigned long line = strtoul(err + 2, &e, 10);
  fz_check(e > err + 2 && line >= 1 && line <= lines, "error line %lu of %zu: \"%s\"", line, lines,
           err);
  fz_check(e[0] == ':' && e[1] == ' ' && e[2] != 0, "error without a message: \"%s\"", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  uint8_t sel = data[0];
  size_t len = size - 1;
  char *text = malloc(len ? len : 1);
  if (!text) return 0;
  memcpy(text, data + 1, len);
  static const int formats[3] = {KT_FORMAT_AUTO, KT_FORMAT_KITE, KT_FORMAT_SCRIPT};
  int format = formats[sel % 3];

  char err[512];
  memset(err, 'x', sizeof err);
  kt_trace_t t;
  int rc = kt_parse_buffer(text, len, "t", format, &t, err, sizeof err);
  fz_check(rc == 0 || rc == -1, "rc %d", rc);
  fz_check(memchr(err, 0, sizeof err) != NULL, "error not NUL-terminated");
  if (rc == 0) {
    fz_check(err[0] == 0, "accepted with an error \"%s\"", err);
    check_trace(&t, format, (const uint8_t *)text, len);
    kt_trace_free(&t);
  } else {
    fz_check(t.n_ops == 0 && t.ops == NULL && t.n_slots == 0, "refused but %zu ops", t.n_ops);
    check_error(err, (const uint8_t *)text, len);
    /* The same message, truncated, in a short buffer (or none at all). */
    size_t short_len = (sel >> 2) % 24;
    char small[24];
    memset(small, 'x', sizeof small);
    rc = kt_parse_buffer(text, len, "t", format, &t, short_len ? small : NULL, short_len);
    fz_check(rc == -1, "second parse rc %d", rc);
    if (short_len) {
      fz_check(memchr(small, 0, short_len) != NULL, "short error not NUL-terminated");
      size_t want = strlen(err) < short_len - 1 ? strlen(err) : short_len - 1;
      fz_check(strlen(small) == want && strncmp(small, err, want) == 0,
               "short error \"%s\" vs \"%s\"", small, err);
    }
  }
  free(text);
  return 0;
}
