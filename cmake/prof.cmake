# cmake/prof.cmake -- the heap profiler's tests (src/prof.h): a program linked against
# libkite.so (the override), and against libkite-secure.so, whose profiles pprof, the flame
# graph (tools/flame.py) and `kite-lab advise --profile` read. The normal build only: the
# sanitizer builds have no override library.
if(TARGET kite AND NOT KITE_SANITIZE)
  add_executable(prof_sites ${PROJECT_SOURCE_DIR}/tests/integration/prof_sites.c)
  target_include_directories(prof_sites PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(prof_sites PRIVATE -O1 -g -fno-omit-frame-pointer)
  target_link_libraries(prof_sites PRIVATE kite Threads::Threads)
  # the same program on the secure build (libkite-secure.so: its wrappers over the core)
  if(TARGET kite-secure)
    add_executable(prof_sites_secure ${PROJECT_SOURCE_DIR}/tests/integration/prof_sites.c)
    target_include_directories(prof_sites_secure PRIVATE ${PROJECT_SOURCE_DIR}/include)
    target_compile_options(prof_sites_secure PRIVATE -O1 -g -fno-omit-frame-pointer)
    target_link_libraries(prof_sites_secure PRIVATE kite-secure Threads::Threads)
  endif()
  add_test(NAME prof_pprof COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/integration/test_prof.py ${CMAKE_BINARY_DIR})
  set_tests_properties(prof_pprof PROPERTIES TIMEOUT 900)
  # tools/flame.py (the flame graph of a profile) and `kite-lab advise --profile`
  add_test(NAME flame COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/tools/test_flame.py ${CMAKE_BINARY_DIR})
  add_test(NAME advise_profile COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/tools/test_advise_profile.py
           ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(flame advise_profile PROPERTIES LABELS tools TIMEOUT 900)
  # bench/sampling_cost.py (the profiler's cost table) runs both sides at one purge delay
  add_test(NAME prof_sampling_cost COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/tools/test_sampling_cost.py
           ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(prof_sampling_cost PROPERTIES LABELS tools TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# under threads, with every validator, in every build (the sanitizer builds included)
if(TARGET kite-noover-debug)
  kite_test(prof_threads SOURCES ${PROJECT_SOURCE_DIR}/tests/integration/test_prof_threads.c LIBS kite-noover-debug)
  target_include_directories(prof_threads PRIVATE ${PROJECT_SOURCE_DIR}/src)
  set_tests_properties(prof_threads PROPERTIES ENVIRONMENT "KITE_PROF=" TIMEOUT 600)
endif()
