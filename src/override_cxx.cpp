// src/override_cxx.cpp -- C++ operator new/delete in every form, served by kite.
//
// new: kite_malloc / kite_aligned path; on failure call the installed new_handler and
// retry; no handler -> throw std::bad_alloc (nothrow forms return nullptr instead).
// delete: kite_free (sized and aligned forms ignore the extra arguments: kite finds the
// size and the block start from the address).
#include <kite.h>
#include <cerrno>
#include <new>

#define KITE_CXX_API __attribute__((visibility("default")))

static void *kite_new_aligned_raw(std::size_t n, std::size_t al) noexcept {
  if (al <= 16) return kite_malloc(n);
  void *p = nullptr;
  return kite_posix_memalign(&p, al, n) == 0 ? p : nullptr;
}

__attribute__((noinline)) static void *kite_new_slow(std::size_t n, std::size_t al, bool nothrow) {
  for (;;) {
    void *p = kite_new_aligned_raw(n, al);
    if (p) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    if (nothrow) {
      try { h(); } catch (...) { return nullptr; }
    } else {
      h();
    }
  }
}

static inline void *kite_new(std::size_t n) {
  void *p = kite_malloc(n);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return kite_new_slow(n, 0, false);
}
static inline void *kite_new_nothrow(std::size_t n) noexcept {
  void *p = kite_malloc(n);
  if (__builtin_expect(p != nullptr, 1)) return p;
  try { return kite_new_slow(n, 0, true); } catch (...) { return nullptr; }
}
static inline void *kite_new_al(std::size_t n, std::align_val_t al) {
  void *p = kite_new_aligned_raw(n, (std::size_t)al);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return kite_new_slow(n, (std::size_t)al, false);
}
static inline void *kite_new_al_nothrow(std::size_t n, std::align_val_t al) noexcept {
  void *p = kite_new_aligned_raw(n, (std::size_t)al);
  if (__builtin_expect(p != nullptr, 1)) return p;
  try { return kite_new_slow(n, (std::size_t)al, true); } catch (...) { return nullptr; }
}

KITE_CXX_API void *operator new(std::size_t n) { return kite_new(n); }
KITE_CXX_API void *operator new[](std::size_t n) { return kite_new(n); }
KITE_CXX_API void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return kite_new_nothrow(n); }
KITE_CXX_API void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return kite_new_nothrow(n); }
KITE_CXX_API void *operator new(std::size_t n, std::align_val_t al) { return kite_new_al(n, al); }
KITE_CXX_API void *operator new[](std::size_t n, std::align_val_t al) { return kite_new_al(n, al); }
KITE_CXX_API void *operator new(std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept { return kite_new_al_nothrow(n, al); }
KITE_CXX_API void *operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept { return kite_new_al_nothrow(n, al); }

KITE_CXX_API void operator delete(void *p) noexcept { kite_free(p); }
KITE_CXX_API void operator delete[](void *p) noexcept { kite_free(p); }
KITE_CXX_API void operator delete(void *p, const std::nothrow_t &) noexcept { kite_free(p); }
KITE_CXX_API void operator delete[](void *p, const std::nothrow_t &) noexcept { kite_free(p); }
KITE_CXX_API void operator delete(void *p, std::size_t) noexcept { kite_free(p); }
KITE_CXX_API void operator delete[](void *p, std::size_t) noexcept { kite_free(p); }
KITE_CXX_API void operator delete(void *p, std::align_val_t) noexcept { kite_free(p); }
KITE_CXX_API void operator delete[](void *p, std::align_val_t) noexcept { kite_free(p); }
KITE_CXX_API void operator delete(void *p, std::size_t, std::align_val_t) noexcept { kite_free(p); }
KITE_CXX_API void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { kite_free(p); }
KITE_CXX_API void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { kite_free(p); }
KITE_CXX_API void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { kite_free(p); }
