# cmake/buddy.cmake -- the standalone buddy page heap (kite-buddy), its tests, its benchmark
# and the lab's buddy variants (kite-lab-buddy).
add_library(kite-buddy STATIC ${PROJECT_SOURCE_DIR}/src/buddy.c)
set_target_properties(kite-buddy PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(kite-buddy PUBLIC ${PROJECT_SOURCE_DIR}/include)

# Unit tests and the reference-model test: normal and ASan builds (single-threaded code,
# nothing for TSan to see).
if(NOT KITE_SANITIZE STREQUAL "thread")
  kite_test(test_buddy SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_buddy.c
            LIBS kite-buddy LABELS buddy unit)
  kite_test(test_buddy_model SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_buddy_model.c
            LIBS kite-buddy LABELS buddy unit)
endif()
