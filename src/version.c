/* src/version.c -- kite_version(): the version of the library that is loaded (the header's
 * KITE_VERSION_STRING is the version a program was compiled against). */
#include <kite.h>
#include <kite/version.h>

__attribute__((visibility("default"))) const char *kite_version(void) {
  return KITE_VERSION_STRING;
}
