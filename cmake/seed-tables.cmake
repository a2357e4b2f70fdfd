# cmake/seed-tables.cmake -- the test of bench/seed_tables.py, which reproduces the seeds'
# HWX / SYS / OPT speedup tables (collatz-ivec, collatz-list; HWX = libkite-lab.so with
# KITE_LAB_POLICY=hwx, SYS = the C library, OPT = libkite.so). See docs/seed-tables.md.
#
# Test (normal build only: it runs the workloads under LD_PRELOAD):
#   seed-tables   tests/bench/test_seed_tables.sh at tiny fixed N (~1 s): both tables for
#                 IVEC and LIST with numeric speedups and no FAIL, a bogus --build-dir exits 2,
#                 a crashing OPT (libkite-bench-crash.so as libkite.so) shows FAIL cells.
if(KITE_SANITIZE STREQUAL "" AND TARGET kite AND TARGET kite-lab
   AND TARGET kite-wl-collatz-ivec AND TARGET kite-wl-collatz-list)
  add_test(NAME seed-tables
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/bench/test_seed_tables.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(seed-tables PROPERTIES LABELS bench TIMEOUT 120)
  # make sure `make`/`ninja all` leaves what the test runs (these targets are in ALL already;
  # the custom target gives a name to build just them)
  set(_kite_seed_deps kite kite-lab kite-wl-collatz-ivec kite-wl-collatz-list)
  if(TARGET kite-bench-crash)
    list(APPEND _kite_seed_deps kite-bench-crash)
  endif()
  add_custom_target(kite-seed-tables DEPENDS ${_kite_seed_deps})
endif()
