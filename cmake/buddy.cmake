# cmake/buddy.cmake -- the standalone buddy page heap (kite-buddy), its tests, its benchmark
# and the lab's buddy variants (kite-lab-buddy).
add_library(kite-buddy STATIC ${PROJECT_SOURCE_DIR}/src/buddy.c ${PROJECT_SOURCE_DIR}/src/buddy_range.c)
set_target_properties(kite-buddy PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(kite-buddy PUBLIC ${PROJECT_SOURCE_DIR}/include)

# Unit tests and the reference-model test: normal and ASan builds (single-threaded code,
# nothing for TSan to see).
if(NOT KITE_SANITIZE STREQUAL "thread")
  kite_test(test_buddy SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_buddy.c
            LIBS kite-buddy LABELS buddy unit)
  target_include_directories(test_buddy PRIVATE ${PROJECT_SOURCE_DIR}/src) # bits.h
  kite_test(test_buddy_model SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_buddy_model.c
            LIBS kite-buddy LABELS buddy unit)
endif()

# Neither the buddy heap nor the core library calls libgcc's bit helpers (__popcountdi2 where
# the target has no popcount instruction: bits.h's _kite_popcount64 counts in place). Normal
# builds only (gcc's, and clang's in build-clang): the sanitizers' runtimes are not kite's.
if(KITE_SANITIZE STREQUAL "")
  add_test(NAME buddy_no_libgcc
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/unit/test_no_libgcc.sh ${CMAKE_NM}
                   $<TARGET_FILE:kite-buddy> $<TARGET_FILE:kite>)
  set_tests_properties(buddy_no_libgcc PROPERTIES LABELS "buddy;unit")
endif()

# The lab's buddy variants (seed 003) behind lab/buddy_policy.h.
set(KITE_LAB_BUDDY_SOURCES ${PROJECT_SOURCE_DIR}/lab/buddy_kite.c)
foreach(f buddy_lists.c buddy_rbtree.c buddy_bitmap.c)
  if(EXISTS ${PROJECT_SOURCE_DIR}/lab/${f})
    list(APPEND KITE_LAB_BUDDY_SOURCES ${PROJECT_SOURCE_DIR}/lab/${f})
  endif()
endforeach()
add_library(kite-lab-buddy STATIC ${KITE_LAB_BUDDY_SOURCES})
target_include_directories(kite-lab-buddy PUBLIC ${PROJECT_SOURCE_DIR}/lab ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(kite-lab-buddy PUBLIC kite-buddy)

# build/kite-buddy-bench: the benchmark (not a test), in the lab beside the variants it drives.
add_executable(kite-buddy-bench ${PROJECT_SOURCE_DIR}/lab/buddy_bench.c)
target_link_libraries(kite-buddy-bench PRIVATE kite-lab-buddy kite-buddy)
set_target_properties(kite-buddy-bench PROPERTIES OUTPUT_NAME kite-buddy-bench)

# Cross-check of every buddy variant (normal and ASan builds).
if(NOT KITE_SANITIZE STREQUAL "thread")
  kite_test(test_buddy_variants SOURCES ${PROJECT_SOURCE_DIR}/tests/lab/test_buddy_variants.c
            LIBS kite-lab-buddy LABELS buddy lab)
endif()

# The benchmark's command-line interface (a format check, no timing); normal build only.
if(KITE_SANITIZE STREQUAL "")
  kite_test(test_buddy_bench SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_buddy_bench.c
            LABELS buddy unit)
  target_compile_definitions(test_buddy_bench PRIVATE
                             KITE_BUDDY_BENCH="$<TARGET_FILE:kite-buddy-bench>")
  add_dependencies(test_buddy_bench kite-buddy-bench)
endif()
