/* tests/install/api_beside.c -- a program linked with libkite-api (-lkite-api): malloc stays
 * the C library's, kite_malloc is kite's, and each frees its own.
 *
 *   api_beside [LIBDIR]    prints "malloc: <object>; kite_malloc: <object>"; exit 0 when
 *                          malloc comes from libc.so.6, kite_malloc from libkite-api.so (in
 *                          LIBDIR when given), kite owns only its own blocks, and both keep
 *                          their contents; 1 otherwise, with the reason on stderr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <kite.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *object_of(void *fn) {
  Dl_info info;
  return dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
}

static int fail(const char *why) {
  fprintf(stderr, "api_beside: %s\n", why);
  return 1;
}

int main(int argc, char **argv) {
  void *(*volatile sys_malloc)(size_t) = malloc;     /* the address the program binds */
  void *(*volatile api_malloc)(size_t) = kite_malloc;
  const char *m = object_of((void *)sys_malloc), *k = object_of((void *)api_malloc);
  printf("malloc: %s; kite_malloc: %s\n", m, k);
  if (!strstr(m, "/libc.so.6") && strcmp(m, "libc.so.6")) return fail("malloc is not libc.so.6's");
  if (!strstr(k, "libkite-api.so")) return fail("kite_malloc is not libkite-api.so's");
  if (argc > 1 && strncmp(k, argv[1], strlen(argv[1]))) return fail("kite_malloc is not from LIBDIR");
  char *a = sys_malloc(100), *b = api_malloc(100);
  if (!a || !b) return fail("out of memory");
  memset(a, 'a', 100);
  memset(b, 'b', 100);
  if (kite_owns(a)) return fail("kite claims the C library's block");
  if (!kite_owns(b)) return fail("kite does not own kite_malloc's block");
  for (int i = 0; i < 100; i++)
    if (a[i] != 'a' || b[i] != 'b') return fail("a block lost its content");
  free(a);
  kite_free(b);
  return 0;
}
