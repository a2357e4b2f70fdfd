# cmake/bench.cmake -- the benchmark workloads (bench/workloads/*.c) and their tests.
#
# Targets (all at the top of the build tree, next to libkite.so):
#   kite-wl-<name>            one executable per workload; bench/run.py runs them under
#                             LD_PRELOAD of each allocator (make bench)
#   kite-bench-exec           the runner's launcher (wall, CPU, peak RSS of one child)
#   libkite-bench-crash.so    test-only preload: malloc raises SIGSEGV after N calls
#   libkite-bench-wrong.so    test-only preload: corrupts a live block now and then
#   libkite-bench-slow.so     test-only preload: glibc's malloc made slow (the --ab test)
#   kite-bench-workloads      builds all of the above
# Tests (normal build only; workloads are measured, not sanitized, and the runner tests
# use LD_PRELOAD): bench-workloads (each workload at tiny size verifies itself, -h, bad
# options, determinism, the self-check catching a corrupting allocator) and bench-runner
# (bench/run.py end to end on two workloads, a crashing allocator reported as such), and
# bench-rss-timeline (bench/rss_timeline.py at tiny size: its CSV, JSON and table) and
# bench-ops-figures (bench/ops_figures.py exit-rss and hugepages at tiny sizes).
if(NOT KITE_SANITIZE STREQUAL "")
  return()
endif()

set(KITE_BENCH_WORKLOADS
    collatz-ivec collatz-list rnbench larson xmalloc cache-thrash cache-scratch
    realloc large graph thread-churn churn xfer thread-rounds phases replay exit-rss tlb
    mstress glibc-thread rptest)
set(_kite_bench_targets "")
foreach(w ${KITE_BENCH_WORKLOADS})
  if(EXISTS ${PROJECT_SOURCE_DIR}/bench/workloads/${w}.c)
    add_executable(kite-wl-${w} ${PROJECT_SOURCE_DIR}/bench/workloads/${w}.c)
    target_link_libraries(kite-wl-${w} PRIVATE Threads::Threads)
    list(APPEND _kite_bench_targets kite-wl-${w})
  endif()
endforeach()
if(TARGET kite-wl-replay)
  target_link_libraries(kite-wl-replay PRIVATE kite-trace-io)
endif()

# the runner's process launcher: measures one child's wall time, CPU and peak RSS
add_executable(kite-bench-exec ${PROJECT_SOURCE_DIR}/bench/workloads/exec.c)
list(APPEND _kite_bench_targets kite-bench-exec)

foreach(kind crash wrong slow)
  string(TOUPPER ${kind} _k)
  add_library(kite-bench-${kind} SHARED ${PROJECT_SOURCE_DIR}/tests/bench/fault_malloc.c)
  target_compile_definitions(kite-bench-${kind} PRIVATE KITE_FAULT_${_k})
  list(APPEND _kite_bench_targets kite-bench-${kind})
endforeach()
add_custom_target(kite-bench-workloads DEPENDS ${_kite_bench_targets})

if(EXISTS ${PROJECT_SOURCE_DIR}/tests/bench/test_workloads.c)
  kite_test(bench-workloads SOURCES ${PROJECT_SOURCE_DIR}/tests/bench/test_workloads.c
            LABELS bench)
  add_dependencies(bench-workloads ${_kite_bench_targets})
  set_tests_properties(bench-workloads PROPERTIES
    ENVIRONMENT "KITE_BENCH_BIN=${CMAKE_BINARY_DIR};KITE_BENCH_SRC=${PROJECT_SOURCE_DIR}"
    TIMEOUT 120)
endif()

if(EXISTS ${PROJECT_SOURCE_DIR}/tests/bench/test_runner.py)
  # The venv's python (make test builds .venv first); plain python3 when it is missing,
  # which the runner supports with --no-charts.
  add_test(NAME bench-runner
    COMMAND sh -c "py=\"$1/.venv/bin/python\"; [ -x \"$py\" ] || py=python3; exec \"$py\" \"$1/tests/bench/test_runner.py\" --build-dir \"$2\""
            sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(bench-runner PROPERTIES LABELS bench TIMEOUT 180)
endif()

if(EXISTS ${PROJECT_SOURCE_DIR}/tests/bench/test_rss_timeline.py)
  # bench/rss_timeline.py at tiny size: CSV, JSON and table of the RSS sampler
  add_test(NAME bench-rss-timeline
    COMMAND sh -c "py=\"$1/.venv/bin/python\"; [ -x \"$py\" ] || py=python3; exec \"$py\" \"$1/tests/bench/test_rss_timeline.py\" --build-dir \"$2\""
            sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(bench-rss-timeline PROPERTIES LABELS bench TIMEOUT 120)
endif()

if(EXISTS ${PROJECT_SOURCE_DIR}/tests/bench/test_ops_figures.py)
  # bench/ops_figures.py (exit-rss, hugepages) at tiny sizes: CSV, JSON and tables
  add_test(NAME bench-ops-figures
    COMMAND sh -c "py=\"$1/.venv/bin/python\"; [ -x \"$py\" ] || py=python3; exec \"$py\" \"$1/tests/bench/test_ops_figures.py\" --build-dir \"$2\""
            sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(bench-ops-figures PROPERTIES LABELS bench TIMEOUT 120)
endif()
