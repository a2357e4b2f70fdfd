# cmake/introspect.cmake -- statistics, heap introspection and tool integration: their tests.
#   introspect           block walks (kite_heap_visit, kite_visit_all) via kite-noover (also ASan)
#   introspect_override  the same through libkite.so, plus mallinfo2/mallinfo/mallopt/malloc_info
#   introspect_stats     JSON snapshots parse and add up, kite-stats prints and diffs them,
#                        malloc_info parses as XML, KITE_SHOW_STATS=json at exit (Python)
set(_ki ${PROJECT_SOURCE_DIR}/tests/introspect)
find_program(KITE_PYTHON3 python3)
if(TARGET kite-noover AND NOT KITE_SANITIZE STREQUAL "thread")
  kite_test(introspect SOURCES ${_ki}/test_introspect.c LIBS kite-noover LABELS introspect)
  target_include_directories(introspect PRIVATE ${PROJECT_SOURCE_DIR}/tests/api ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(introspect PRIVATE -fno-builtin) # keep every malloc the test makes
  set_tests_properties(introspect PROPERTIES TIMEOUT 120)
endif()
if(KITE_SANITIZE STREQUAL "" AND TARGET kite)
  kite_test(introspect_override SOURCES ${_ki}/test_introspect.c LIBS kite LABELS introspect)
  target_include_directories(introspect_override PRIVATE ${PROJECT_SOURCE_DIR}/tests/api)
  target_compile_options(introspect_override PRIVATE -fno-builtin)
  target_compile_definitions(introspect_override PRIVATE KITE_TEST_PLAIN)
  set_tests_properties(introspect_override PROPERTIES TIMEOUT 120)
  if(KITE_PYTHON3)
    add_test(NAME introspect_stats COMMAND sh -c
             "py=${PROJECT_SOURCE_DIR}/.venv/bin/python; [ -x \"$py\" ] || py=${KITE_PYTHON3}; exec \"$py\" \"$0\" \"$@\""
             ${_ki}/test_stats.py ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
    set_tests_properties(introspect_stats PROPERTIES LABELS introspect TIMEOUT 120)
  endif()
endif()

# libkite-valgrind.so: kite for programs run under valgrind's memcheck (src/valgrind.c).
# A separate library: libkite.so is never built with client requests. On by default where
# valgrind's headers are installed; the test needs the valgrind program too.
#   introspect_valgrind  memcheck finds a planted leak and a planted use after free in
#                        programs linked with it, and nothing in a clean churning program
include(CheckIncludeFile)
check_include_file(valgrind/memcheck.h KITE_HAVE_MEMCHECK_H)
if(KITE_HAVE_MEMCHECK_H)
  set(_kite_vg_default ON)
else()
  set(_kite_vg_default OFF)
endif()
option(KITE_VALGRIND "build libkite-valgrind.so (memcheck client requests)" ${_kite_vg_default})
if(KITE_VALGRIND AND KITE_SANITIZE STREQUAL "")
  _kite_core_target(kite-valgrind SHARED 0 0)
  target_sources(kite-valgrind PRIVATE ${_kc}/valgrind.c)
  # KITE_BACKGROUND off by default here: a thread of kite's still running at exit leaves
  # glibc's TLS block for it (allocated through kite) reported as possibly lost
  target_compile_definitions(kite-valgrind PRIVATE KITE_VALGRIND=1 KITE_DEFAULT_BACKGROUND=0)
  set_target_properties(kite-valgrind PROPERTIES LINKER_LANGUAGE C)
  foreach(p leak uaf clean)
    add_executable(vg_${p} ${_ki}/vg_${p}.c)
    target_compile_options(vg_${p} PRIVATE -O0 -fno-builtin)
    target_link_libraries(vg_${p} PRIVATE kite-valgrind Threads::Threads)
  endforeach()
  find_program(KITE_VALGRIND_EXE valgrind)
  if(KITE_VALGRIND_EXE)
    add_test(NAME introspect_valgrind COMMAND bash ${_ki}/test_valgrind.sh ${CMAKE_BINARY_DIR})
    set_tests_properties(introspect_valgrind PROPERTIES LABELS introspect TIMEOUT 300)
  endif()
endif()

# ASan build: freed kite blocks are poisoned (src/tool.h); a use after free is reported.
#   introspect_asan_uaf  silent through correct reuse, then ASan reports the planted read
if(KITE_SANITIZE STREQUAL "address" AND TARGET kite-noover)
  add_executable(asan_uaf ${_ki}/asan_uaf.c)
  target_include_directories(asan_uaf PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(asan_uaf PRIVATE -fno-builtin)
  target_link_libraries(asan_uaf PRIVATE kite-noover Threads::Threads)
  add_test(NAME introspect_asan_uaf COMMAND asan_uaf)
  set_tests_properties(introspect_asan_uaf PROPERTIES LABELS introspect TIMEOUT 120
    PASS_REGULAR_EXPRESSION "correct phase done.*ERROR: AddressSanitizer: use-after-poison")
endif()
