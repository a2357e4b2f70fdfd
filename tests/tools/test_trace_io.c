/* tests/tools/test_trace_io.c -- the trace parser (lab/trace/trace_io.h): both formats, the
 * id -> slot mapping, and an exact message with the line number for every malformed input. */
#include "test.h"
#include "trace_io.h"

static int parse(const char *text, int fmt, kt_trace_t *t, char *err, size_t errlen) {
  return kt_parse_buffer(text, strlen(text), "t", fmt, t, err, errlen);
}

TEST(script_ops_and_slots) {
  kt_trace_t t;
  char err[256];
  const char *s = "# a comment\n\na 7 10\na 3 0\n  r 7 30  \nf 3\na 3 5\nf 7\nf 3";
  assert_int_eq(parse(s, KT_FORMAT_AUTO, &t, err, sizeof err), 0);
  expect_int_eq(t.format, KT_FORMAT_SCRIPT);
  assert_uint_eq(t.n_ops, 7);
  expect_uint_eq(t.n_slots, 2);
  expect_uint_eq(t.n_lines, 9);
  const kt_op_t *o = t.ops;
  expect_int_eq(o[0].kind, KT_MALLOC);
  expect_uint_eq(o[0].line, 3);
  expect_uint_eq(o[0].size, 10);
  expect_uint_eq(o[0].slot, 0);
  expect_uint_eq(o[1].slot, 1);
  expect_uint_eq(o[1].size, 0);
  expect_int_eq(o[2].kind, KT_REALLOC);
  expect_uint_eq(o[2].old_slot, 0);
  expect_uint_eq(o[2].slot, 0);
  expect_uint_eq(o[2].size, 30);
  expect_uint_eq(o[2].line, 5);
  expect_int_eq(o[3].kind, KT_FREE);
  expect_uint_eq(o[3].slot, 1);
  expect_uint_eq(o[4].slot, 1); /* id 3 reused: same slot */
  expect_uint_eq(o[6].line, 9);
  kt_trace_free(&t);
}

TEST(kite_ops) {
  kt_trace_t t;
  char err[256];
  const char *s =
      "# kite-trace v1\n# pid 1\nm 0 24 100\nc 1 3 8 100\na 2 64 100 101\nr 0 5 48 100\n"
      "r - 6 16 101\nf - 100\nf 5 100\nf 1 100\nf 2 101\nf 6 101\n";
  assert_int_eq(parse(s, KT_FORMAT_AUTO, &t, err, sizeof err), 0);
  expect_int_eq(t.format, KT_FORMAT_KITE);
  assert_uint_eq(t.n_ops, 10);
  expect_uint_eq(t.n_slots, 5);
  const kt_op_t *o = t.ops;
  expect_int_eq(o[1].kind, KT_CALLOC);
  expect_uint_eq(o[1].size, 24);
  expect_uint_eq(o[1].align, 3);
  expect_int_eq(o[2].kind, KT_ALIGNED);
  expect_uint_eq(o[2].align, 64);
  expect_uint_eq(o[2].size, 100);
  expect_int_eq(o[3].kind, KT_REALLOC);
  expect_uint_eq(o[3].old_slot, o[0].slot);
  expect_true(o[3].slot != o[0].slot);
  expect_uint_eq(o[4].old_slot, KT_NO_SLOT);
  expect_int_eq(o[5].kind, KT_FREE);
  expect_uint_eq(o[5].slot, KT_NO_SLOT);
  expect_uint_eq(o[5].line, 8);
  kt_trace_free(&t);
}

TEST(script_forced_even_with_kite_header_absent) {
  kt_trace_t t;
  char err[256];
  /* "a ID SIZE" in a .script is a malloc, though a kite trace's "a" is aligned. */
  assert_int_eq(parse("a 1 16\nf 1\n", KT_FORMAT_SCRIPT, &t, err, sizeof err), 0);
  expect_int_eq(t.ops[0].kind, KT_MALLOC);
  kt_trace_free(&t);
  assert_int_eq(parse("", KT_FORMAT_AUTO, &t, err, sizeof err), 0);
  expect_uint_eq(t.n_ops, 0);
  kt_trace_free(&t);
}

static void expect_error(const char *text, int fmt, const char *want) {
  kt_trace_t t;
  char err[256];
  int rc = parse(text, fmt, &t, err, sizeof err);
  expect_int_eq(rc, -1);
  expect_str_eq(err, want);
  expect_true(t.ops == NULL && t.n_ops == 0);
}

/* The workshop's slot semantics: a second "f" is free(NULL), "r" of a NULL or never-used id
 * is realloc(NULL, n), "a" of a live id leaks the old block into a slot of its own. */
TEST(script_slot_semantics) {
  kt_trace_t t;
  char err[256];
  const char *s = "a 1 10\nf 1\nf 1\nf 2\nr 4 100\nr 1 8\na 1 20\nf 1\nf 4\n";
  assert_int_eq(parse(s, KT_FORMAT_SCRIPT, &t, err, sizeof err), 0);
  assert_uint_eq(t.n_ops, 9);
  const kt_op_t *o = t.ops;
  expect_uint_eq(o[1].slot, o[0].slot);
  expect_uint_eq(o[1].flags, 0);
  expect_uint_eq(o[2].slot, KT_NO_SLOT); /* second free of id 1: free(NULL) */
  expect_uint_eq(o[2].flags, KT_OP_NULL);
  expect_uint_eq(o[3].slot, KT_NO_SLOT); /* never-used id 2: free(NULL) */
  expect_uint_eq(o[3].flags, KT_OP_NULL);
  expect_int_eq(o[4].kind, KT_REALLOC); /* never-used id 4: realloc(NULL, 100) */
  expect_uint_eq(o[4].old_slot, KT_NO_SLOT);
  expect_uint_eq(o[4].flags, KT_OP_NULL);
  expect_true(o[4].slot != KT_NO_SLOT);
  expect_uint_eq(o[5].old_slot, KT_NO_SLOT); /* id 1 is NULL again: realloc(NULL, 8) */
  expect_uint_eq(o[5].slot, o[0].slot);
  expect_int_eq(o[6].kind, KT_MALLOC); /* id 1 live: the block of line 6 stays, unreachable */
  expect_true(o[6].slot != o[5].slot);
  expect_uint_eq(o[7].slot, o[6].slot); /* "f 1" frees the newest block */
  expect_uint_eq(o[8].slot, o[4].slot);
  expect_uint_eq(t.n_slots, 3);
  kt_trace_free(&t);
}

TEST(malformed_script) {
  expect_error("a 1 10\nx 1 10\n", KT_FORMAT_AUTO, "t:2: unknown op 'x' (a .script has a, r, f)");
  expect_error("a 1 10\n\na\n", KT_FORMAT_AUTO, "t:3: missing id");
  expect_error("a 1\n", KT_FORMAT_AUTO, "t:1: missing size");
  expect_error("a 1 1O\n", KT_FORMAT_AUTO, "t:1: size '1O' is not a non-negative decimal number");
  expect_error("a -1 10\n", KT_FORMAT_AUTO, "t:1: id '-1' is not a non-negative decimal number");
  expect_error("f 1 2\n", KT_FORMAT_AUTO, "t:1: unexpected trailing text '2'");
  expect_error("a 1 99999999999999999999999\n", KT_FORMAT_AUTO,
               "t:1: size '99999999999999999999999' is not a non-negative decimal number");
}

TEST(malformed_kite) {
  expect_error("# kite-trace v1\nm 1 10\n", KT_FORMAT_AUTO, "t:2: missing thread id");
  expect_error("# kite-trace v1\nq 1 10 0\n", KT_FORMAT_AUTO,
               "t:2: unknown op 'q' (a kite trace has m, c, a, r, f)");
  expect_error("# kite-trace v1\na 1 24 10 0\n", KT_FORMAT_AUTO,
               "t:2: alignment 24 is not a power of two");
  expect_error("# kite-trace v1\nc 1 4294967296 4294967296 0\n", KT_FORMAT_AUTO,
               "t:2: calloc count * size overflows");
  expect_error("# kite-trace v1\nm - 10 0\n", KT_FORMAT_AUTO,
               "t:2: id '-' is not a non-negative decimal number");
  expect_error("# kite-trace v1\nm 1 10 0\nr 1 - 5 0\n", KT_FORMAT_AUTO,
               "t:3: new id '-' is not a non-negative decimal number");
  expect_error("# kite-trace v2\nm 1 10 0\n", KT_FORMAT_AUTO,
               "t:1: unsupported trace version '# kite-trace v2'");
  expect_error("# kite-trace v1 raw\n0 m 1 10 0\n", KT_FORMAT_AUTO,
               "t:1: a raw capture (lines in thread order); finalize it with tools/kite-trace "
               "--finalize RAW OUT");
}

TEST(realloc_into_a_live_id_is_an_error) {
  expect_error("# kite-trace v1\nm 1 10 0\nm 2 10 0\nr 1 2 5 0\n", KT_FORMAT_AUTO,
               "t:4: id 2 allocated while still live (allocated at line 3)");
}

TEST(many_ids_grow_the_map) {
  /* 5000 live ids, freed in reverse: exercises the hash map's growth. */
  size_t cap = 5000 * 24 * 2 + 1, n = 0;
  char *buf = malloc(cap);
  assert_true(buf != NULL);
  for (int i = 0; i < 5000; i++) n += (size_t)snprintf(buf + n, cap - n, "a %d %d\n", i * 7919, i);
  for (int i = 4999; i >= 0; i--) n += (size_t)snprintf(buf + n, cap - n, "f %d\n", i * 7919);
  kt_trace_t t;
  char err[256];
  int rc = kt_parse_buffer(buf, n, "big", KT_FORMAT_AUTO, &t, err, sizeof err);
  free(buf);
  assert_int_eq(rc, 0);
  expect_uint_eq(t.n_ops, 10000);
  expect_uint_eq(t.n_slots, 5000);
  expect_uint_eq(t.ops[9999].slot, 0);
  expect_uint_eq(t.ops[5000].slot, 4999);
  kt_trace_free(&t);
}

TEST(missing_file) {
  kt_trace_t t;
  char err[256];
  expect_int_eq(kt_parse_file("/nonexistent/x.script", &t, err, sizeof err), -1);
  expect_str_eq(err, "/nonexistent/x.script: cannot open: No such file or directory");
}

int main(void) {
  test_rng_init(1);
  RUN(script_ops_and_slots);
  RUN(kite_ops);
  RUN(script_forced_even_with_kite_header_absent);
  RUN(script_slot_semantics);
  RUN(malformed_script);
  RUN(malformed_kite);
  RUN(realloc_into_a_live_id_is_an_error);
  RUN(many_ids_grow_the_map);
  RUN(missing_file);
  return test_main_end();
}
