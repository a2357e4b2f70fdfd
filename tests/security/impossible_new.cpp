// Case 9, C++: new of a size no machine can back throws std::bad_alloc (and the nothrow
// form returns nullptr).
#include <cstdio>
#include <new>

// Each result is stored here: a new-expression whose result goes nowhere may be elided whole
// (C++14 [expr.new]), and Clang does so, so neither the throw nor the nullptr would happen.
static char *volatile sink;

int main() {
  volatile size_t big = (size_t)1 << 46;
  bool threw = false;
  try {
    char *p = new char[big];
    sink = p;
    p[0] = 1;
    std::printf("RESULT: WRONG\n");
    return 0;
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  char *q = new (std::nothrow) char[big];
  sink = q;
  std::printf("RESULT: %s\n", threw && !q ? "SAFE" : "WRONG");
  return 0;
}
