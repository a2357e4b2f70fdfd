/* Case 12: is the heap layout predictable? 64 x malloc(32) in a fresh process: PREDICTABLE
 * when most consecutive blocks sit at one constant distance, RANDOMIZED otherwise. (Not a
 * vulnerability by itself: it tells how much an attacker can rely on adjacency.) */
#include "sec.h"

int main(void) {
  enum { N = 64 };
  char *a[N];
  for (int i = 0; i < N; i++) a[i] = malloc(32);
  long d0 = a[1] - a[0];
  int same = 0;
  for (int i = 1; i < N; i++) same += (a[i] - a[i - 1]) == d0;
  printf("RESULT: %s\n", same >= N / 2 ? "PREDICTABLE" : "RANDOMIZED");
  return 0;
}
