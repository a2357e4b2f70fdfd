// src/override_cxx.cpp -- C++ operator new/delete in every form, served by kite.
//
// new: kite_malloc / the aligned path; on failure call the installed new_handler and retry;
// no handler -> throw std::bad_alloc (nothrow forms return nullptr instead).
// delete: kite_free (sized and aligned forms ignore the extra arguments: kite finds the
// size and the block start from the address).
//
// libkite.so does not depend on libstdc++ (which would cost every preloaded C program
// ~1.5 MiB of RSS): the few C++ runtime symbols used here are referenced weakly. Whenever
// operator new runs in a C++ program, the runtime is loaded and they resolve. This file is
// compiled with -fno-exceptions; it throws by calling the C++ ABI directly.
#include <kite.h>
#include <new>

#define KITE_CXX_API __attribute__((visibility("default")))

// Weak references to the C++ runtime, under their own names so the compiler cannot assume
// they exist (std::bad_alloc is just a vtable pointer: built by hand).
extern "C" {
void *kite_cxa_allocate_exception(std::size_t) noexcept __asm__("__cxa_allocate_exception") __attribute__((weak));
void kite_cxa_throw(void *, void *, void (*)(void *)) __asm__("__cxa_throw") __attribute__((weak, noreturn));
std::new_handler kite_get_new_handler() noexcept __asm__("_ZSt15get_new_handlerv") __attribute__((weak));
void kite_bad_alloc_dtor(void *) __asm__("_ZNSt9bad_allocD1Ev") __attribute__((weak));
extern char kite_bad_alloc_typeinfo __asm__("_ZTISt9bad_alloc") __attribute__((weak));
extern void *kite_bad_alloc_vtable[] __asm__("_ZTVSt9bad_alloc") __attribute__((weak));
void _kite_write_str(int fd, const char *s);
// kite_malloc, kite_posix_memalign and kite_free under hidden names (entry.h's alias lists,
// defined where the library's standard names are: the default or the secure build's): a
// direct call, where the exported names would be called through the GOT.
void *_kite_cxx_malloc(std::size_t n) noexcept __attribute__((visibility("hidden")));
int _kite_cxx_posix_memalign(void **out, std::size_t a, std::size_t n) noexcept __attribute__((visibility("hidden")));
void _kite_cxx_free(void *p) noexcept __attribute__((visibility("hidden")));
}

[[noreturn]] __attribute__((noinline, cold)) static void throw_bad_alloc() {
  if (kite_cxa_allocate_exception && kite_cxa_throw && kite_bad_alloc_dtor && &kite_bad_alloc_typeinfo &&
      kite_bad_alloc_vtable) {
    void *e = kite_cxa_allocate_exception(sizeof(void *));
    *(void **)e = (void *)(kite_bad_alloc_vtable + 2); /* vptr: past offset-to-top and RTTI */
    kite_cxa_throw(e, &kite_bad_alloc_typeinfo, kite_bad_alloc_dtor);
  }
  _kite_write_str(2, "kite: operator new: out of memory and no C++ runtime to throw std::bad_alloc\n");
  __builtin_trap();
}

static std::new_handler current_handler() { return kite_get_new_handler ? kite_get_new_handler() : nullptr; }

static void *kite_new_aligned_raw(std::size_t n, std::size_t al) noexcept {
  if (al <= 16) return _kite_cxx_malloc(n);
  void *p = nullptr;
  return _kite_cxx_posix_memalign(&p, al, n) == 0 ? p : nullptr;
}

// Retry loop of [new.delete.single]: call the new_handler until the allocation succeeds.
__attribute__((noinline)) static void *kite_new_slow(std::size_t n, std::size_t al, bool nothrow) {
  for (;;) {
    void *p = kite_new_aligned_raw(n, al);
    if (p) return p;
    std::new_handler h = current_handler();
    if (!h) {
      if (nothrow) return nullptr;
      throw_bad_alloc();
    }
    h();
  }
}

static inline void *kite_new(std::size_t n) {
  void *p = _kite_cxx_malloc(n);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return kite_new_slow(n, 0, false);
}
static inline void *kite_new_nothrow(std::size_t n) noexcept {
  void *p = _kite_cxx_malloc(n);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return kite_new_slow(n, 0, true);
}
static inline void *kite_new_al(std::size_t n, std::align_val_t al) {
  void *p = kite_new_aligned_raw(n, (std::size_t)al);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return kite_new_slow(n, (std::size_t)al, false);
}
static inline void *kite_new_al_nothrow(std::size_t n, std::align_val_t al) noexcept {
  void *p = kite_new_aligned_raw(n, (std::size_t)al);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return kite_new_slow(n, (std::size_t)al, true);
}

KITE_CXX_API void *operator new(std::size_t n) { return kite_new(n); }
KITE_CXX_API void *operator new[](std::size_t n) { return kite_new(n); }
KITE_CXX_API void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return kite_new_nothrow(n); }
KITE_CXX_API void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return kite_new_nothrow(n); }
KITE_CXX_API void *operator new(std::size_t n, std::align_val_t al) { return kite_new_al(n, al); }
KITE_CXX_API void *operator new[](std::size_t n, std::align_val_t al) { return kite_new_al(n, al); }
KITE_CXX_API void *operator new(std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept { return kite_new_al_nothrow(n, al); }
KITE_CXX_API void *operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept { return kite_new_al_nothrow(n, al); }

KITE_CXX_API void operator delete(void *p) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete[](void *p) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete(void *p, const std::nothrow_t &) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete[](void *p, const std::nothrow_t &) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete(void *p, std::size_t) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete[](void *p, std::size_t) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete(void *p, std::align_val_t) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete[](void *p, std::align_val_t) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete(void *p, std::size_t, std::align_val_t) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { _kite_cxx_free(p); }
KITE_CXX_API void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { _kite_cxx_free(p); }
