/* Case 8: the program starts with fd 2 closed (run it as `closed_stderr 2>&-`), later opens
 * a file that gets fd 2, then makes an invalid free (of a stack address) that the allocator
 * may report. usage: closed_stderr FILE. The verdict: CORRUPTION if the allocator wrote
 * into FILE (its report went into the program's data), SAFE otherwise. If fd 2 was open at
 * start the test is meaningless: WRONG. */
#include "sec.h"
#include <fcntl.h>

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (fcntl(2, F_GETFD) != -1) return sec_result("WRONG");
  void *warm = malloc(16); /* the allocator is initialized while fd 2 is closed */
  free(warm);
  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd != 2) return sec_result("WRONG");
  const char data[] = "program data\n";
  if (write(fd, data, sizeof data - 1) < 0) return sec_result("WRONG");
  int local[4];
  free(local); /* the misuse: most allocators report it on fd 2 */
  void *p = malloc(100);
  free(p);
  close(fd);
  char buf[4096];
  fd = open(argv[1], O_RDONLY);
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return sec_result(n == (ssize_t)(sizeof data - 1) ? "SAFE" : "CORRUPTION");
}
