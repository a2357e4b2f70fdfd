/* tests/install/consumer.h -- the checks both consumer programs make, after their own work:
 * malloc is kite's (kite_owns on a fresh malloc block), kite counted the allocations, the
 * loaded library's version is the header's, and the kite in the process is the expected one:
 * `shared PREFIX` (libkite.so.MAJOR mapped from under PREFIX) or `static` (no libkite.so). */
#ifndef KITE_CONSUMER_H
#define KITE_CONSUMER_H
#include <kite.h>
#include <kite/version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int consumer_fails;
#define CONSUMER_CHECK(e) \
  do { if (!(e)) { fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #e); consumer_fails++; } } while (0)

static void consumer_check_kite(int argc, char **argv, const char *what) {
  CONSUMER_CHECK(argc >= 2);
  if (argc < 2) return;
  int shared = strcmp(argv[1], "shared") == 0;
  void *p = malloc(40);
  CONSUMER_CHECK(p && kite_owns(p)); /* malloc itself is kite's */
  free(p);
  kite_stats_t st;
  kite_stats_get(&st);
  CONSUMER_CHECK(st.small_allocs > 0);
  CONSUMER_CHECK(strcmp(kite_version(), KITE_VERSION_STRING) == 0);
  /* which libkite is mapped */
  char soname[64];
  snprintf(soname, sizeof soname, "/libkite.so.%d", KITE_VERSION_MAJOR);
  FILE *f = fopen("/proc/self/maps", "r");
  CONSUMER_CHECK(f != NULL);
  char line[4096], *found = NULL;
  while (f && fgets(line, sizeof line, f)) {
    char *path = strchr(line, '/');
    if (path && strstr(path, "/libkite")) { found = path; break; }
  }
  if (f) fclose(f);
  if (shared) {
    CONSUMER_CHECK(found != NULL);
    if (found && argc >= 3) CONSUMER_CHECK(strncmp(found, argv[2], strlen(argv[2])) == 0);
    if (found) CONSUMER_CHECK(strstr(found, soname) != NULL);
  } else {
    CONSUMER_CHECK(found == NULL);
  }
  printf("%s (%s): kite %s, %s", what, argv[1], kite_version(), found ? found : "linked in\n");
  fflush(stdout);
  kite_stats_print(1);
}
#endif
