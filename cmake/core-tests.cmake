# cmake/core-tests.cmake -- the test suites of the allocator core (tests/api, tests/stress,
# tests/integration, tests/programs). Included after cmake/core.cmake.
#
# Which tests run where:
#   normal build   core_api (kite_* API via kite-noover-debug: KITE_DEBUG=3, validators on), core_api_override (plain names,
#                  linked with libkite.so), core_model, core_model_override, core_cxx,
#                  core_stress, core_stress_override, core_stress_purge0,
#                  core_threads, core_threads_override,
#                  core_fork, core_fork_override, core_fork_early, core_oom, core_oom_override, core_memory_return, core_large,
#                  core_misuse, core_misuse_override, core_static_stderr (libkite.a), core_programs,
#                  core_guarded, core_stack
#   ASan+UBSan     core_api, core_model, core_stress and core_threads (reduced), core_fork (its
#                  children start no thread there: test_fork.c), core_fork_early, core_misuse,
#                  core_guarded (all of it: kite's SIGSEGV handler takes over from ASan's),
#                  core_stack via kite-noover-debug
#   TSan           every multi-threaded one: core_api, core_stress and core_threads (reduced),
#                  core_fork, core_fork_early, core_misuse, core_memory_return, core_guarded (its in-process
#                  tests: TSan takes the fault children's signals over), core_stack (and test_core_smoke,
#                  cmake/core.cmake) via kite-noover-debug
#   core_memory_return runs in the normal and TSan builds (not ASan: it measures RSS)
# No override or LD_PRELOAD test is registered in a sanitizer build. Every test carries the
# label `core-tests`; run them with `ctest -L core-tests`.
set(_ct ${PROJECT_SOURCE_DIR}/tests)

function(_kite_ct_props name timeout)
  set_tests_properties(${name} PROPERTIES LABELS core-tests TIMEOUT ${timeout})
endfunction()

if(TARGET kite-noover)
  kite_test(core_api SOURCES ${_ct}/api/test_api.c LIBS kite-noover-debug)
  _kite_ct_props(core_api 300)
  if(KITE_SANITIZE STREQUAL "thread")
    # its multi-threaded test and a few quick ones (the rest is single-threaded, checks the
    # resident set, which TSan's shadow inflates, and takes minutes under TSan)
    set_tests_properties(core_api PROPERTIES ENVIRONMENT
      "KITE_TEST_ONLY=owns_other_thread,owns_foreign,malloc_zero,free_null,free_sized,realloc_content")
  endif()
  if(NOT KITE_SANITIZE STREQUAL "thread")
    kite_test(core_model SOURCES ${_ct}/api/test_model.c LIBS kite-noover-debug)
    _kite_ct_props(core_model 120)
    if(KITE_SANITIZE STREQUAL "address")
      set_tests_properties(core_model PROPERTIES ENVIRONMENT "KITE_MODEL_OPS=60000")
    endif()
  endif()
  kite_test(core_stress SOURCES ${_ct}/stress/test_stress.c LIBS kite-noover-debug)
  _kite_ct_props(core_stress 300)
  # KITE_STRESS_SIZE: live threads, threads per round, operations per thread, rounds
  if(KITE_SANITIZE STREQUAL "address")
    set_tests_properties(core_stress PROPERTIES ENVIRONMENT "KITE_STRESS_SIZE=8 24 4000 2")
  elseif(KITE_SANITIZE STREQUAL "thread")
    set_tests_properties(core_stress PROPERTIES ENVIRONMENT "KITE_STRESS_SIZE=8 16 2000 2")
  endif()
  kite_test(core_threads SOURCES ${_ct}/stress/test_threads.c LIBS kite-noover-debug)
  _kite_ct_props(core_threads 300)
  if(KITE_SANITIZE STREQUAL "address")
    set_tests_properties(core_threads PROPERTIES ENVIRONMENT "KITE_THREADS_SCALE=3")
  elseif(KITE_SANITIZE STREQUAL "thread")
    set_tests_properties(core_threads PROPERTIES ENVIRONMENT "KITE_THREADS_SCALE=1")
  endif()
  kite_test(core_fork SOURCES ${_ct}/integration/test_fork.c LIBS kite-noover-debug)
  _kite_ct_props(core_fork 300)
  # forks before kite's fork handlers are registered (a constructor that runs before kite's)
  kite_test(core_fork_early SOURCES ${_ct}/integration/fork_early.c LIBS kite-noover-debug)
  _kite_ct_props(core_fork_early 120)
  # every build: kite's misuse reports do not meet ASan's (kite's blocks are its own mmap'ed
  # memory, which ASan does not track), but for the two cases that write into a freed block:
  # the ASan build poisons freed small blocks (src/tool.h), so there the write is ASan's
  # use-after-poison report, which the test expects instead (test_misuse.c: freed_write)
  kite_test(core_misuse SOURCES ${_ct}/integration/test_misuse.c LIBS kite-noover-debug)
  target_compile_definitions(core_misuse PRIVATE KITE_TEST_DEBUG=${KITE_TEST_DEBUG})
  _kite_ct_props(core_misuse 120)
  if(KITE_SANITIZE STREQUAL "address")
    set_tests_properties(core_misuse PROPERTIES TIMEOUT 300)
  endif()
  if(KITE_SANITIZE STREQUAL "thread")
    # the children of a multi-threaded parent start threads of their own
    set_tests_properties(core_fork PROPERTIES ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:die_after_fork=0")
    set_tests_properties(core_misuse PROPERTIES TIMEOUT 300) # ~45 s under TSan on a busy machine
  endif()
  # sampled guarded allocations (KITE_GUARDED_SAMPLE) and the stack capture they use
  kite_test(core_guarded SOURCES ${_ct}/integration/test_guarded.c ${_ct}/integration/stack_notables.c
            LIBS kite-noover-debug)
  target_include_directories(core_guarded PRIVATE ${PROJECT_SOURCE_DIR}/src)
  set_source_files_properties(${_ct}/integration/stack_notables.c PROPERTIES
                              COMPILE_OPTIONS "-fno-asynchronous-unwind-tables;-fno-unwind-tables")
  _kite_ct_props(core_guarded 300)
  if(KITE_SANITIZE STREQUAL "address")
    # ASan installs its SEGV handler at start-up; kite's (src/os/linux.c) replaces it when
    # the guarded region is made and passes on the faults that are not kite's, which ASan
    # allows while allow_user_segv_handler is 1 (its default, stated here: at 0 it keeps its
    # own and the fault children die with ASan's SEGV report instead of kite's)
    set_tests_properties(core_guarded PROPERTIES ENVIRONMENT
                         "ASAN_OPTIONS=detect_leaks=0:allow_user_segv_handler=1")
  elseif(KITE_SANITIZE STREQUAL "thread")
    # TSan's runtime takes the fault children's SIGSEGV and abort over: the in-process
    # tests only (threads, fork, thread exit, the rate); the normal build runs the children
    set_tests_properties(core_guarded PROPERTIES ENVIRONMENT "KITE_GUARDED_TEST_INPROCESS=1")
  endif()
  # the stack capture through another object's frames (libc's qsort), cold and warm, racing
  kite_test(core_stack SOURCES ${_ct}/integration/test_stack.c LIBS kite-noover-debug)
  target_include_directories(core_stack PRIVATE ${PROJECT_SOURCE_DIR}/src)
  _kite_ct_props(core_stack 120)
  # memory return: thread exit, idle with the background purger, fork, OOM, many threads
  if(NOT KITE_SANITIZE STREQUAL "address")
    kite_test(core_memory_return SOURCES ${_ct}/integration/test_memory_return.c LIBS kite-noover)
    _kite_ct_props(core_memory_return 180)
    if(KITE_SANITIZE STREQUAL "thread")
      set_tests_properties(core_memory_return PROPERTIES ENVIRONMENT "KITE_MEMRET_TSAN=1")
      # the fork case alone: its child starts a purger thread of its own, which TSan refuses
      # after a multi-threaded fork unless die_after_fork=0 (as core_fork's children)
      add_test(NAME core_memory_return_fork COMMAND core_memory_return fork_purger)
      _kite_ct_props(core_memory_return_fork 180)
      set_tests_properties(core_memory_return_fork PROPERTIES ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:die_after_fork=0")
    endif()
  endif()
  if(KITE_SANITIZE STREQUAL "")
    kite_test(core_oom SOURCES ${_ct}/integration/test_oom.c LIBS kite-noover-debug)
    _kite_ct_props(core_oom 120)
    # large runs and huge blocks: realloc in place, reuse of freed runs, memory coming back
    kite_test(core_large SOURCES ${_ct}/integration/test_large.c LIBS kite-noover-debug)
    _kite_ct_props(core_large 120)
    # the same stress with immediate purging of freed pages (decommit on every free)
    add_test(NAME core_stress_purge0 COMMAND core_stress 8 16 6000 2)
    _kite_ct_props(core_stress_purge0 300)
    set_tests_properties(core_stress_purge0 PROPERTIES ENVIRONMENT "KITE_PURGE_DELAY_MS=0")
    kite_test(core_options SOURCES ${_ct}/integration/test_options.c LIBS kite-noover)
    _kite_ct_props(core_options 120)
    # KITE_HUGEPAGES: which arena memory is advised (VmFlags "hg" in /proc/self/smaps)
    kite_test(core_hugepages SOURCES ${_ct}/integration/test_hugepages.c LIBS kite-noover)
    _kite_ct_props(core_hugepages 120)
  endif()
endif()

if(KITE_SANITIZE STREQUAL "" AND TARGET kite)
  kite_test(core_api_override SOURCES ${_ct}/api/test_api.c LIBS kite)
  target_compile_definitions(core_api_override PRIVATE KITE_TEST_PLAIN)
  _kite_ct_props(core_api_override 120)
  kite_test(core_model_override SOURCES ${_ct}/api/test_model.c LIBS kite)
  target_compile_definitions(core_model_override PRIVATE KITE_TEST_PLAIN)
  _kite_ct_props(core_model_override 120)
  kite_test(core_stress_override SOURCES ${_ct}/stress/test_stress.c LIBS kite)
  target_compile_definitions(core_stress_override PRIVATE KITE_TEST_PLAIN)
  _kite_ct_props(core_stress_override 300)
  set_tests_properties(core_stress_override PROPERTIES ENVIRONMENT "KITE_STRESS_SIZE=32 64 4000 2")
  kite_test(core_threads_override SOURCES ${_ct}/stress/test_threads.c LIBS kite)
  target_compile_definitions(core_threads_override PRIVATE KITE_TEST_PLAIN)
  _kite_ct_props(core_threads_override 300)
  foreach(t fork oom misuse)
    kite_test(core_${t}_override SOURCES ${_ct}/integration/test_${t}.c LIBS kite)
    target_compile_definitions(core_${t}_override PRIVATE KITE_TEST_PLAIN)
    _kite_ct_props(core_${t}_override 180)
  endforeach()
  kite_test(core_cxx SOURCES ${_ct}/api/test_cxx.cpp LIBS kite)
  _kite_ct_props(core_cxx 120)
  # libkite.a linked in: a program constructor moves fd 2 onto a data file before kite's
  # first report, which must still reach the start-up stderr and never the file
  if(TARGET kite-static)
    kite_test(core_static_stderr SOURCES ${_ct}/integration/test_static_stderr.c LIBS kite-static)
    target_compile_options(core_static_stderr PRIVATE -fno-builtin -Wno-free-nonheap-object)
    _kite_ct_props(core_static_stderr 60)
  endif()

  # Real programs (tests/programs/run.sh): the workloads it runs, built plain (to be
  # preloaded, and as the reference), linked with libkite.so, and linked with libkite.a.
  add_executable(core_prog_cxx ${_ct}/programs/cxx_churn.cpp)
  target_link_libraries(core_prog_cxx PRIVATE Threads::Threads)
  add_executable(core_prog_cxx_linked ${_ct}/programs/cxx_churn.cpp)
  target_link_libraries(core_prog_cxx_linked PRIVATE kite Threads::Threads)
  add_executable(core_prog_mt ${_ct}/programs/mt_churn.c)
  target_link_libraries(core_prog_mt PRIVATE Threads::Threads)
  if(TARGET kite-static)
    add_executable(core_prog_mt_static ${_ct}/programs/mt_churn.c)
    target_link_libraries(core_prog_mt_static PRIVATE kite-static Threads::Threads)
    target_compile_definitions(core_prog_mt_static PRIVATE MT_CHURN_KITE)
    target_include_directories(core_prog_mt_static PRIVATE ${PROJECT_SOURCE_DIR}/include)
  endif()
  add_test(NAME core_programs COMMAND bash ${_ct}/programs/run.sh ${CMAKE_BINARY_DIR})
  _kite_ct_props(core_programs 300)
  # what run.sh runs (cmake/test-targets.py builds it for the cross stages)
  set(_kite_progs $<TARGET_LINKER_FILE:kite> $<TARGET_FILE:core_prog_cxx> $<TARGET_FILE:core_prog_cxx_linked>
      $<TARGET_FILE:core_prog_mt>)
  if(TARGET core_prog_mt_static)
    list(APPEND _kite_progs $<TARGET_FILE:core_prog_mt_static>)
  endif()
  set_tests_properties(core_programs PROPERTIES REQUIRED_FILES "${_kite_progs}")
endif()
