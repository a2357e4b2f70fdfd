# cmake/security.cmake -- the misuse programs of tests/security/ (one standalone program per
# case, standard malloc API only, run under each allocator by tools/security_matrix.py) and
# the tests that kite and kite secure keep their promises on them; the secure build's own
# checks (tests/secure/: canary, write after free, guard pages, random layout, quarantine,
# the block walks' sizes).
# `make security` writes docs/security.md.
set(_ks ${PROJECT_SOURCE_DIR}/tests/security)
if(KITE_SANITIZE STREQUAL "" AND EXISTS ${_ks}/sec.h)
  foreach(c race_double_free uaf_write_link overflow_into_free double_free_key uaf_remote
            huge_header closed_stderr impossible_sizes realloc_freed layout meta_arena meta_heap)
    add_executable(sec-${c} ${_ks}/${c}.c)
    # the misuse must reach the allocator as written: no builtin malloc folding
    # (the last two: GCC-only warnings, unknown to Clang)
    target_compile_options(sec-${c} PRIVATE -O1 -fno-builtin -Wno-free-nonheap-object
                           $<$<C_COMPILER_ID:GNU>:-Wno-use-after-free>
                           $<$<C_COMPILER_ID:GNU>:-Wno-alloc-size-larger-than>)
    target_link_libraries(sec-${c} PRIVATE Threads::Threads)
  endforeach()
  add_executable(sec-impossible_new ${_ks}/impossible_new.cpp)
  target_compile_options(sec-impossible_new PRIVATE -O1 $<$<CXX_COMPILER_ID:GNU>:-Wno-alloc-size-larger-than>)
  if(TARGET kite-static)
    # setuid case: a setuid program ignores LD_PRELOAD paths, so kite is linked in
    add_executable(sec-setuid_kite ${_ks}/layout.c)
    target_link_libraries(sec-setuid_kite PRIVATE kite-static Threads::Threads)
  endif()
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_FOUND AND TARGET kite)
    add_test(NAME security_kite
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/security_matrix.py
                     --build-dir ${CMAKE_BINARY_DIR} --check kite)
    set_tests_properties(security_kite PROPERTIES LABELS security TIMEOUT 600)
  endif()
endif()

# The secure build's checks: one standalone program per protection, run under
# libkite-secure.so (each re-runs itself as a child per misuse and judges how it ended), and
# the matrix's promised cases under it (security_kite_secure).
set(_kss ${PROJECT_SOURCE_DIR}/tests/secure)
if(KITE_SANITIZE STREQUAL "" AND TARGET kite-secure AND EXISTS ${_kss}/secure_test.h)
  foreach(c overflow uaf guard random quarantine free visit)
    add_executable(secure-${c} ${_kss}/secure_${c}.c)
    target_compile_options(secure-${c} PRIVATE -O1 -fno-builtin $<$<C_COMPILER_ID:GNU>:-Wno-use-after-free>)
    add_dependencies(secure-${c} kite-secure)
    add_test(NAME secure_${c} COMMAND secure-${c})
    set_tests_properties(secure_${c} PROPERTIES LABELS "security;secure" TIMEOUT 120
                         ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:kite-secure>")
  endforeach()
  # the override build's conformance, model, stress, thread, fork and C++ tests with the
  # secure build preloaded over libkite.so (its names win): the same contracts must hold
  # (core_oom is left out: a 1 MiB block and its guard take a 2 MiB run, so fewer fit
  # under its RLIMIT_AS; core_misuse expects invalid frees to be ignored, secure aborts)
  foreach(t api model stress threads fork)
    if(TARGET core_${t}_override)
      add_test(NAME core_${t}_secure COMMAND core_${t}_override)
      set_tests_properties(core_${t}_secure PROPERTIES LABELS "secure;core-tests" TIMEOUT 300
                           ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:kite-secure>;KITE_STRESS_SIZE=32 64 4000 2")
    endif()
  endforeach()
  if(TARGET core_cxx)
    add_test(NAME core_cxx_secure COMMAND core_cxx)
    set_tests_properties(core_cxx_secure PROPERTIES LABELS "secure;core-tests" TIMEOUT 120
                         ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:kite-secure>")
  endif()
  if(Python3_FOUND)
    add_test(NAME security_kite_secure
             COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tools/security_matrix.py
                     --build-dir ${CMAKE_BINARY_DIR} --check kite-secure)
    set_tests_properties(security_kite_secure PROPERTIES LABELS "security;secure" TIMEOUT 600)
  endif()
endif()
