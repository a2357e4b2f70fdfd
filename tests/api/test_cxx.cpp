/* tests/api/test_cxx.cpp -- C++ operator new/delete served by kite (linked with libkite.so).
 *
 * Every replaceable form is called explicitly: plain, array, nothrow, sized delete, aligned,
 * sized+aligned, aligned nothrow, and the new-expressions that use them. Each block must be
 * kite's (kite_owns), big enough (kite_malloc_usable_size), aligned, and keep its content.
 * Failure: the throwing forms throw std::bad_alloc, the nothrow forms return nullptr, and
 * the installed new_handler is called before giving up; under a lowered RLIMIT_AS (in a
 * child process) new throws std::bad_alloc, nothrow new returns nullptr, and new recovers.
 */
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "api_names.h"
#include "test.h"

static void *volatile cxx_sink; /* where a block escapes to, so its allocation stays */

static void check(void *p, size_t n, size_t align, uint64_t tag) {
  if (!p) { TEST_FAIL_("null block for %zu bytes", n); return; }
  expect_true(kite_owns(p));
  expect_true(kite_malloc_usable_size(p) >= n);
  expect_uint_eq((uintptr_t)p % align, 0);
  /* whole block up to 512 KiB; beyond, its first and last 256 KiB */
  const size_t edge = 256 << 10;
  unsigned char *c = (unsigned char *)p;
  if (n <= 2 * edge) {
    test_fill(c, n, tag);
    expect_true(test_verify(c, n, tag));
  } else {
    test_fill(c, edge, tag);
    test_fill(c + n - edge, edge, tag + 1);
    expect_true(test_verify(c, edge, tag) && test_verify(c + n - edge, edge, tag + 1));
  }
}

static const size_t sizes[] = {1, 8, 16, 24, 100, 1000, 4096, 10000, 70000, 1 << 20, 5 << 20};

TEST(plain_and_array) {
  for (size_t n : sizes) {
    void *p = ::operator new(n);
    check(p, n, n >= 16 ? 16 : 1, n);
    ::operator delete(p);
    p = ::operator new(n);
    check(p, n, n >= 16 ? 16 : 1, n + 1);
    ::operator delete(p, n); /* sized */
    p = ::operator new[](n);
    check(p, n, n >= 16 ? 16 : 1, n + 2);
    ::operator delete[](p);
    p = ::operator new[](n);
    check(p, n, n >= 16 ? 16 : 1, n + 3);
    ::operator delete[](p, n); /* sized array */
  }
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, size_t(8));
  void *z = ::operator new(0); /* unique, non-null */
  void *z2 = ::operator new(0);
  expect_true(z != nullptr && z2 != nullptr && z != z2);
  ::operator delete(z);
  ::operator delete(z2);
}

TEST(nothrow) {
  for (size_t n : sizes) {
    void *p = ::operator new(n, std::nothrow);
    check(p, n, 1, n);
    ::operator delete(p, std::nothrow);
    p = ::operator new[](n, std::nothrow);
    check(p, n, 1, n + 1);
    ::operator delete[](p, std::nothrow);
  }
}

TEST(aligned) {
  for (size_t a = 1; a <= (size_t(1) << 26); a *= 2) {
    std::align_val_t al{a};
    for (size_t n : {size_t(1), size_t(100), a, a + 3}) {
      void *p = ::operator new(n, al);
      check(p, n, a, a + n);
      ::operator delete(p, al);
      p = ::operator new(n, al);
      check(p, n, a, a + n + 1);
      ::operator delete(p, n, al); /* sized + aligned */
      p = ::operator new[](n, al);
      check(p, n, a, a + n + 2);
      ::operator delete[](p, al);
      p = ::operator new[](n, al);
      check(p, n, a, a + n + 3);
      ::operator delete[](p, n, al);
      p = ::operator new(n, al, std::nothrow);
      check(p, n, a, a + n + 4);
      ::operator delete(p, al, std::nothrow);
      p = ::operator new[](n, al, std::nothrow);
      check(p, n, a, a + n + 5);
      ::operator delete[](p, al, std::nothrow);
    }
  }
}

struct alignas(256) Over {
  unsigned char bytes[300];
};

TEST(new_expressions) {
  int *i = new int(42);
  expect_true(kite_owns(i));
  expect_int_eq(*i, 42);
  delete i;
  Over *o = new Over;
  expect_true(kite_owns(o));
  expect_uint_eq((uintptr_t)o % 256, 0);
  test_fill(o->bytes, sizeof o->bytes, 7);
  expect_true(test_verify(o->bytes, sizeof o->bytes, 7));
  delete o;
  Over *oa = new Over[5];
  expect_uint_eq((uintptr_t)oa % 256, 0);
  for (int k = 0; k < 5; k++) test_fill(oa[k].bytes, sizeof oa[k].bytes, (uint64_t)k);
  for (int k = 0; k < 5; k++) expect_true(test_verify(oa[k].bytes, sizeof oa[k].bytes, (uint64_t)k));
  delete[] oa;
  /* standard containers: churn, then check the contents */
  std::map<int, std::string> m;
  std::vector<std::unique_ptr<std::vector<int>>> v;
  for (int k = 0; k < 20000; k++) {
    m[k * 7 % 5003] = std::string((size_t)(k % 97), (char)('a' + k % 26));
    v.emplace_back(new std::vector<int>((size_t)(k % 50), k));
    if (k % 3 == 0) v.erase(v.begin() + (long)(v.size() / 2));
  }
  long sum = 0;
  for (auto &e : m) sum += (long)e.second.size() + e.first;
  for (auto &e : v)
    for (int x : *e) sum += x % 13;
  long expect = 0;
  {
    std::map<int, size_t> ref;
    std::vector<std::vector<int>> rv;
    for (int k = 0; k < 20000; k++) {
      ref[k * 7 % 5003] = (size_t)(k % 97);
      rv.emplace_back((size_t)(k % 50), k);
      if (k % 3 == 0) rv.erase(rv.begin() + (long)(rv.size() / 2));
    }
    for (auto &e : ref) expect += (long)e.second + e.first;
    for (auto &e : rv)
      for (int x : e) expect += x % 13;
  }
  expect_int_eq(sum, expect);
  auto sp = std::make_shared<std::string>(1000, 'k');
  expect_uint_eq(sp->size(), 1000);
}

static int handler_calls;
static void count_then_give_up() {
  handler_calls++;
  std::set_new_handler(nullptr); /* the next failure throws */
}

TEST(failure) {
  const size_t huge = test_opaque(size_t(1) << 62);
  int threw = 0;
  try { (void)::operator new(huge); } catch (const std::bad_alloc &) { threw++; }
  try { (void)::operator new[](huge); } catch (const std::bad_alloc &) { threw++; }
  try { (void)::operator new(huge, std::align_val_t(4096)); } catch (const std::bad_alloc &) { threw++; }
  try { (void)::operator new[](huge, std::align_val_t(64)); } catch (const std::bad_alloc &) { threw++; }
  try { (void)::operator new(test_opaque(SIZE_MAX)); } catch (const std::bad_alloc &) { threw++; }
  expect_int_eq(threw, 5);
  expect_ptr_eq(::operator new(huge, std::nothrow), nullptr);
  expect_ptr_eq(::operator new[](huge, std::nothrow), nullptr);
  expect_ptr_eq(::operator new(huge, std::align_val_t(256), std::nothrow), nullptr);
  expect_ptr_eq(::operator new[](huge, std::align_val_t(256), std::nothrow), nullptr);

  /* the new_handler is called, and new throws once it is removed */
  handler_calls = 0;
  std::set_new_handler(count_then_give_up);
  threw = 0;
  try { (void)::operator new(huge); } catch (const std::bad_alloc &) { threw = 1; }
  expect_int_eq(threw, 1);
  expect_int_eq(handler_calls, 1);
  handler_calls = 0;
  std::set_new_handler(count_then_give_up);
  expect_ptr_eq(::operator new(huge, std::nothrow), nullptr);
  expect_int_eq(handler_calls, 1);
  std::set_new_handler(nullptr);

  /* array-new length overflow */
  threw = 0;
  try {
    size_t count = test_opaque(SIZE_MAX / 4);
    auto *a = new uint64_t[count];
    cxx_sink = a; /* escapes: a compiler may not drop the new-expression (Clang does otherwise) */
    delete[] a;
  } catch (const std::bad_alloc &) { threw = 1; }
  expect_int_eq(threw, 1);
  /* after failures, allocation works */
  void *p = ::operator new(100);
  check(p, 100, 16, 1);
  ::operator delete(p);
}

/* Under a lowered RLIMIT_AS (in a child): new throws std::bad_alloc, nothrow new returns
 * nullptr, and after deleting everything new works again. Exit status 0 = all as expected. */
static int oom_child() {
  std::vector<char *> blocks;
  blocks.reserve(1 << 16);
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (n <= 0) return 2;
  buf[n] = 0;
  size_t vm = (size_t)strtoull(buf, nullptr, 10) * (size_t)sysconf(_SC_PAGESIZE);
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = vm + (64u << 20);
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 3;
  bool threw = false;
  try {
    while (blocks.size() < (1u << 16)) {
      char *p = new char[1 << 20];
      p[0] = 1;
      blocks.push_back(p);
    }
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  if (!threw) return 4;
  if (::operator new(size_t(1) << 20, std::nothrow) != nullptr) return 5;
  if (::operator new(size_t(1) << 20, std::align_val_t(4096), std::nothrow) != nullptr) return 6;
  for (char *p : blocks) delete[] p;
  char *again = new char[1 << 20];
  again[(1 << 20) - 1] = 1;
  delete[] again;
  return 0;
}

TEST(oom_bad_alloc) {
  if (test_emulator_lacks("oom_bad_alloc", TEST_EMU_RLIMIT_AS)) return;
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(oom_child());
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) TEST_FAIL_("the child died of signal %d", WTERMSIG(status));
  else expect_int_eq(WEXITSTATUS(status), 0);
}

int main() {
  test_rng_init(0x6b697465ull);
  RUN(plain_and_array);
  RUN(nothrow);
  RUN(aligned);
  RUN(new_expressions);
  RUN(failure);
  RUN(oom_bad_alloc);
  return test_main_end();
}
