# cmake/lab.cmake -- the lab's heap policies (lab/), the preloadable libkite-lab.so, and the
# policy conformance tests.
#
#   kite-lab-policies   STATIC, PIC: every policy + the registry (lab/policy.h)
#   kite-lab            SHARED -> build/libkite-lab.so (KITE_LAB_POLICY=NAME selects a policy)
#   test_policy         conformance + randomized tests, one CTest entry per policy
#   test_policy_preload real programs and the malloc family under libkite-lab.so (normal build)
set(KITE_LAB_POLICY_NAMES seglist rbtree_clrs rbtree_unified rbtree_linked rbtree_stack rbtree_topdown splay_stack splay_topdown hwx seglist_exact hwx_kr pow2)
set(KITE_LAB_POLICY_SOURCES lab/registry.c)
foreach(p ${KITE_LAB_POLICY_NAMES})
  list(APPEND KITE_LAB_POLICY_SOURCES lab/${p}.c)
endforeach()

add_library(kite-lab-policies STATIC ${KITE_LAB_POLICY_SOURCES})
set_target_properties(kite-lab-policies PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(kite-lab-policies PUBLIC ${PROJECT_SOURCE_DIR}/lab ${PROJECT_SOURCE_DIR}/include)

if(KITE_SANITIZE STREQUAL "" OR KITE_SANITIZE STREQUAL "address")
  kite_test(test_policy SOURCES tests/lab/test_policy.c LIBS kite-lab-policies LABELS lab)
  foreach(p ${KITE_LAB_POLICY_NAMES})
    add_test(NAME test_policy_${p} COMMAND test_policy ${p})
    set_tests_properties(test_policy_${p} PROPERTIES LABELS lab)
  endforeach()
endif()

# The preloadable front: normal builds only (a sanitizer runtime cannot sit under LD_PRELOAD).
if(KITE_SANITIZE STREQUAL "")
  add_library(kite-lab SHARED lab/preload.c)
  target_link_libraries(kite-lab PRIVATE kite-lab-policies Threads::Threads)
  target_compile_options(kite-lab PRIVATE -fno-builtin)
  kite_test(test_policy_preload SOURCES tests/lab/test_policy_preload.c LIBS ${CMAKE_DL_LIBS} LABELS lab)
  target_compile_definitions(test_policy_preload PRIVATE KITE_LAB_SO="$<TARGET_FILE:kite-lab>")
  add_dependencies(test_policy_preload kite-lab)
endif()
