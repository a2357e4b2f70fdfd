# cmake/lab-tools.cmake -- the lab's trace tools: the trace parser (kite-trace-io), the replay
# tool (build/kite-replay), the capture shim (build/libkite-trace.so) and their tests.
# The parts that need the lab policies or the kite core are built only when those targets
# exist, so this fragment configures on its own.

add_library(kite-trace-io STATIC ${PROJECT_SOURCE_DIR}/lab/trace/trace_io.c)
target_include_directories(kite-trace-io PUBLIC ${PROJECT_SOURCE_DIR}/lab/trace)

add_executable(kite-replay ${PROJECT_SOURCE_DIR}/tools/replay.c)
target_link_libraries(kite-replay PRIVATE kite-trace-io)
if(TARGET kite-lab-policies)
  target_compile_definitions(kite-replay PRIVATE KITE_REPLAY_HAVE_POLICIES=1)
  target_include_directories(kite-replay PRIVATE ${PROJECT_SOURCE_DIR}/lab)
  target_link_libraries(kite-replay PRIVATE kite-lab-policies)
endif()
if(TARGET kite-noover)
  target_compile_definitions(kite-replay PRIVATE KITE_REPLAY_HAVE_KITE=1)
  target_include_directories(kite-replay PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(kite-replay PRIVATE kite-noover Threads::Threads)
endif()

# The capture shim: build/libkite-trace.so (never in a sanitizer build: it is preloaded).
if(KITE_SANITIZE STREQUAL "")
  add_library(kite-trace SHARED ${PROJECT_SOURCE_DIR}/tools/trace_shim.c)
  set_target_properties(kite-trace PROPERTIES C_VISIBILITY_PRESET hidden)
  target_link_libraries(kite-trace PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
endif()

# Tests: none in the TSan build (single-threaded tools; the shim is never sanitized).
if(NOT KITE_SANITIZE STREQUAL "thread")
  kite_test(test_trace_io SOURCES ${PROJECT_SOURCE_DIR}/tests/tools/test_trace_io.c
            LIBS kite-trace-io LABELS tools)
endif()

# End-to-end tests of the tools (python3, standard library only): normal build only, since they
# preload the capture shim into real programs.
# In the ASan build the same script runs without the capture tests (no shim is built there),
# so the replay's checking and timing code runs under ASan+UBSan.
# TIMEOUT 900: the normal build's run needs about 26 s of CPU, which a load of 25 on 2 cores
# stretches past 300 s of wall time; the script's own limit per command grows with the load
# too (test_replay.py's limit()).
find_program(KITE_PYTHON3 python3)
if(KITE_SANITIZE STREQUAL "address" AND KITE_PYTHON3)
  add_test(NAME test_replay COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/tools/test_replay.py
           ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_replay PROPERTIES LABELS tools TIMEOUT 900
    ENVIRONMENT "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0")
endif()
if(KITE_SANITIZE STREQUAL "" AND KITE_PYTHON3)
  add_executable(trace_mt ${PROJECT_SOURCE_DIR}/tests/tools/trace_mt.c)
  target_link_libraries(trace_mt PRIVATE Threads::Threads)
  target_compile_options(trace_mt PRIVATE -fno-builtin) # keep every malloc/free pair
  # The repository's .venv (make venv) has matplotlib for the lab.py smoke test; without it
  # that one test is skipped.
  add_test(NAME test_replay COMMAND sh -c
           "py=${PROJECT_SOURCE_DIR}/.venv/bin/python; [ -x \"$py\" ] || py=${KITE_PYTHON3}; exec \"$py\" \"$0\" \"$@\""
           ${PROJECT_SOURCE_DIR}/tests/tools/test_replay.py ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_replay PROPERTIES LABELS tools TIMEOUT 900)
endif()
