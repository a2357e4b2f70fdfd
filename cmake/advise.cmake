# cmake/advise.cmake -- `tools/kite-lab advise` ("which allocator suits my program?") and the
# allocation sites of the capture shim (KITE_TRACE_SITES=1): their tests, normal build only
# (they preload build/libkite-trace.so into programs).
#   test_trace_sites  the "#@"/"# map" lines: shim -> finalize -> readers, old traces unchanged
#   test_advise       the HTML report of advise_leaky (known sites and leak), and its rendering
#                     in headless chromium when installed (skipped, and said, otherwise); a
#                     malloc-heavy program of about 2 s (advise_busy) under --budget: the window,
#                     the verdict in the program's terms, the trace deleted (also on SIGTERM,
#                     during advise_leaky's replays)
# advise_leaky is built with frame pointers so its sites have their callers.
if(KITE_SANITIZE STREQUAL "" AND KITE_PYTHON3 AND TARGET kite-trace AND TARGET trace_mt)
  add_executable(advise_leaky ${PROJECT_SOURCE_DIR}/tests/tools/advise_leaky.c)
  target_compile_options(advise_leaky PRIVATE -fno-omit-frame-pointer -fno-optimize-sibling-calls -fno-builtin)
  target_link_libraries(advise_leaky PRIVATE Threads::Threads)
  add_executable(advise_busy ${PROJECT_SOURCE_DIR}/tests/tools/advise_busy.c)
  foreach(t test_trace_sites test_advise)
    add_test(NAME ${t} COMMAND sh -c
             "py=${PROJECT_SOURCE_DIR}/.venv/bin/python; [ -x \"$py\" ] || py=${KITE_PYTHON3}; exec \"$py\" \"$0\" \"$@\""
             ${PROJECT_SOURCE_DIR}/tests/tools/${t}.py ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
    set_tests_properties(${t} PROPERTIES LABELS tools TIMEOUT 900)
  endforeach()
endif()
