# cmake/platform.cmake -- page sizes other than the build machine's, and address width.
#   kite-pagecheck  STATIC  the internals build (KITE_DEBUG=${KITE_TEST_DEBUG}, test hooks)
#                   compiled with KITE_OS_PAGE_CHECK and KITE_OS_PAGE_MAX=64 KiB: the
#                   KITE_TEST_OS_PAGE environment variable forces the OS page size, the os
#                   layer maps as a kernel of that page would, and any mmap, munmap,
#                   mprotect, madvise, mincore or mremap range kite issues that is not
#                   aligned to it aborts the process with a message (src/os/linux.c)
#   page16k_* / page64k_*  the API, model, stress, threads, fork, misuse, guarded, large and
#                   memory-return suites linked with it, run with 16 KiB and 64 KiB pages
#   core_platform   tests/unit/test_platform.c: the check fires on a misaligned range, a
#                   page above KITE_OS_PAGE_MAX is refused at start-up, a huge page larger
#                   than an arena is never advised, addresses above KITE_ADDR_BITS are never
#                   kite's (and a real mapping there, where the kernel gives one)
#   musl_*          (KITE_MUSL builds: make musl) the API, model, stress, threads, fork,
#                   misuse and OOM suites on the standard names (KITE_TEST_PLAIN), linked
#                   statically with musl and libkite.a: kite_owns proves every block of
#                   musl's malloc family came from kite
set(_pt ${PROJECT_SOURCE_DIR}/tests)
if(KITE_MUSL AND TARGET kite-static)
  foreach(t api:api/test_api.c model:api/test_model.c stress:stress/test_stress.c
            threads:stress/test_threads.c fork:integration/test_fork.c
            misuse:integration/test_misuse.c oom:integration/test_oom.c)
    string(REPLACE ":" ";" parts ${t})
    list(GET parts 0 suite)
    list(GET parts 1 src)
    kite_test(musl_${suite} SOURCES ${_pt}/${src} LIBS kite-static LABELS "core-tests;platform;musl")
    target_compile_definitions(musl_${suite} PRIVATE KITE_TEST_PLAIN)
    # linked by musl-gcc (libkite.a's C++ operators would make CMake pick the C++ driver,
    # which links glibc)
    target_link_options(musl_${suite} PRIVATE -static)
    set_target_properties(musl_${suite} PROPERTIES LINKER_LANGUAGE C)
    set_tests_properties(musl_${suite} PROPERTIES TIMEOUT 300)
  endforeach()
  set_tests_properties(musl_threads PROPERTIES ENVIRONMENT "KITE_THREADS_SCALE=3")
  return()
endif()
# Normal build only (the sanitizer builds run the suites at the machine's page).
if(NOT KITE_SANITIZE STREQUAL "" OR NOT TARGET kite-noover-debug)
  return()
endif()

_kite_core_target(kite-pagecheck STATIC 0 ${KITE_TEST_DEBUG})
target_compile_definitions(kite-pagecheck PUBLIC KITE_TEST_HOOKS=1 KITE_TEST_DEBUG=${KITE_TEST_DEBUG}
                           KITE_OS_PAGE_CHECK=1 KITE_OS_PAGE_MAX=65536)

# suite name -> source; each binary runs at both forced sizes
set(_page_suites api:api/test_api.c model:api/test_model.c stress:stress/test_stress.c
    threads:stress/test_threads.c fork:integration/test_fork.c misuse:integration/test_misuse.c
    guarded:integration/test_guarded.c large:integration/test_large.c
    memory_return:integration/test_memory_return.c)
foreach(entry ${_page_suites})
  string(REPLACE ":" ";" parts ${entry})
  list(GET parts 0 suite)
  list(GET parts 1 src)
  add_executable(pagecheck_${suite} ${_pt}/${src})
  target_include_directories(pagecheck_${suite} PRIVATE ${PROJECT_SOURCE_DIR}/include ${_pt} ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(pagecheck_${suite} PRIVATE kite-pagecheck Threads::Threads)
  foreach(kib 16 64)
    math(EXPR bytes "${kib} * 1024")
    add_test(NAME page${kib}k_${suite} COMMAND pagecheck_${suite})
    set_tests_properties(page${kib}k_${suite} PROPERTIES LABELS "core-tests;platform" TIMEOUT 300
                         ENVIRONMENT "KITE_TEST_OS_PAGE=${bytes}")
  endforeach()
endforeach()
target_compile_definitions(pagecheck_misuse PRIVATE KITE_TEST_DEBUG=${KITE_TEST_DEBUG})
target_sources(pagecheck_guarded PRIVATE ${_pt}/integration/stack_notables.c) # built without unwind tables (core-tests.cmake)

kite_test(core_platform SOURCES ${_pt}/unit/test_platform.c LIBS kite-pagecheck LABELS core unit platform)
target_include_directories(core_platform PRIVATE ${PROJECT_SOURCE_DIR}/src)
