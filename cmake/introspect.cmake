# cmake/introspect.cmake -- statistics, heap introspection and tool integration: their tests.
#   introspect           block walks (kite_heap_visit, kite_visit_all) via kite-noover (also ASan)
#   introspect_override  the same through libkite.so, plus mallinfo2/mallinfo/mallopt/malloc_info
#   introspect_stats     JSON snapshots parse and add up, kite-stats prints and diffs them,
#                        malloc_info parses as XML, KITE_SHOW_STATS=json at exit (Python)
set(_ki ${PROJECT_SOURCE_DIR}/tests/introspect)
find_program(KITE_PYTHON3 python3)
if(TARGET kite-noover AND NOT KITE_SANITIZE STREQUAL "thread")
  kite_test(introspect SOURCES ${_ki}/test_introspect.c LIBS kite-noover LABELS introspect)
  target_include_directories(introspect PRIVATE ${PROJECT_SOURCE_DIR}/tests/api)
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
