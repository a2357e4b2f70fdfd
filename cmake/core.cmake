# cmake/core.cmake -- the allocator core.
#   kite         SHARED  build/libkite.so: overrides the malloc family and C++ operators
#   kite-static  STATIC  build/libkite.a: the same, for linking (self-contained: the buddy
#                        page heap is compiled in)
#   kite-secure  SHARED  build/libkite-secure.so: the secure build (KITE_SECURE=1, secure.c)
#   kite-api     SHARED  build/libkite-api.so: the kite_* API without the malloc override, for
#                        programs that keep the system malloc and call kite_malloc beside it
#   kite-noover  STATIC  only the kite_* API, KITE_DEBUG=${KITE_DEBUG}: what the tools link
#   kite-noover-debug STATIC  the same with KITE_DEBUG=${KITE_TEST_DEBUG} (validators after
#                        every slow-path operation, fill patterns) and KITE_TEST_HOOKS:
#                        what the core's tests link, in every build (sanitizers included)
# Release flags for kite/kite-static (benchmarks measure the real thing): -O2, hidden
# visibility with only the API exported, no semantic interposition, initial-exec TLS.
set(_kc ${PROJECT_SOURCE_DIR}/src)
# One concept a file, listed bottom-up (src/types.h names the layers; docs/design.md draws them).
set(KITE_CORE_SOURCES
    ${_kc}/os/linux.c
    ${_kc}/message.c ${_kc}/sizeclass.c ${_kc}/stats.c ${_kc}/options.c ${_kc}/report.c ${_kc}/secret.c
    ${_kc}/buddy.c ${_kc}/buddy_range.c ${_kc}/pagemap.c ${_kc}/arena.c ${_kc}/huge.c
    ${_kc}/arena_check.c ${_kc}/decay.c ${_kc}/thp.c
    ${_kc}/purger.c ${_kc}/links.c ${_kc}/page.c ${_kc}/remote.c ${_kc}/heap.c ${_kc}/heap_reclaim.c
    ${_kc}/heap_abandon.c ${_kc}/heap_pool.c ${_kc}/stack.c ${_kc}/guarded.c ${_kc}/prof.c ${_kc}/prof_write.c
    ${_kc}/alloc.c ${_kc}/free.c ${_kc}/introspect.c ${_kc}/visit.c ${_kc}/override.c
    ${_kc}/init.c ${_kc}/version.c)
set(KITE_CORE_FLAGS -fvisibility=hidden -fno-semantic-interposition -ftls-model=initial-exec
    -fno-plt -fno-stack-protector)

set(KITE_TEST_DEBUG 3 CACHE STRING "KITE_DEBUG level of kite-noover-debug, the library the core's tests link")

function(_kite_core_target name type override debug)
  set(srcs ${KITE_CORE_SOURCES})
  if(override)
    list(APPEND srcs ${_kc}/override_cxx.cpp)
    set_source_files_properties(${_kc}/override_cxx.cpp PROPERTIES COMPILE_OPTIONS "-fno-exceptions")
  endif()
  add_library(${name} ${type} ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include PRIVATE ${_kc})
  target_compile_definitions(${name} PRIVATE KITE_OVERRIDE=${override} KITE_DEBUG=${debug})
  target_compile_options(${name} PRIVATE ${KITE_CORE_FLAGS})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON
                        C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden)
  target_link_libraries(${name} PUBLIC Threads::Threads)
endfunction()

_kite_core_target(kite-noover STATIC 0 ${KITE_DEBUG})
_kite_core_target(kite-noover-debug STATIC 0 ${KITE_TEST_DEBUG})
target_compile_definitions(kite-noover-debug PUBLIC KITE_TEST_HOOKS=1 KITE_TEST_DEBUG=${KITE_TEST_DEBUG})

if(KITE_SANITIZE STREQUAL "")
  _kite_core_target(kite SHARED 1 0)
  # linked as C: no libstdc++ dependency (override_cxx.cpp references the C++ runtime weakly)
  set_target_properties(kite PROPERTIES OUTPUT_NAME kite LINKER_LANGUAGE C)
  target_link_options(kite PRIVATE -Wl,-z,now -Wl,--exclude-libs,ALL)
  _kite_core_target(kite-static STATIC 1 0)
  set_target_properties(kite-static PROPERTIES OUTPUT_NAME kite)
  # build/libkite-secure.so: the secure build (src/secure_layout.h): guard pages, randomized
  # layout, canaries, zero on free, quarantine; secure.c wraps the core's entry points
  _kite_core_target(kite-secure SHARED 1 0)
  target_sources(kite-secure PRIVATE ${_kc}/secure.c ${_kc}/secure_large.c)
  target_compile_definitions(kite-secure PRIVATE KITE_SECURE=1)
  set_target_properties(kite-secure PROPERTIES OUTPUT_NAME kite-secure LINKER_LANGUAGE C)
  target_link_options(kite-secure PRIVATE -Wl,-z,now -Wl,--exclude-libs,ALL)
  _kite_core_target(kite-api SHARED 0 0)
  set_target_properties(kite-api PROPERTIES OUTPUT_NAME kite-api LINKER_LANGUAGE C)
  target_link_options(kite-api PRIVATE -Wl,-z,now -Wl,--exclude-libs,ALL)
endif()

# The core's own quick smoke test (the full suites are in core-tests.cmake).
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/unit/test_core_smoke.c)
  kite_test(test_core_smoke SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_core_smoke.c
            LIBS kite-noover-debug LABELS core unit)
  target_include_directories(test_core_smoke PRIVATE ${_kc})
  # a KITE_* integer longer than a long is refused without signed overflow: the default stays
  add_test(NAME core_option_saturates COMMAND test_core_smoke option-value 10)
  add_test(NAME core_option_saturates_neg COMMAND test_core_smoke option-value 10)
  set_tests_properties(core_option_saturates PROPERTIES LABELS "core;unit"
                       ENVIRONMENT "KITE_PURGE_DELAY_MS=123456789012345678901234567890")
  set_tests_properties(core_option_saturates_neg PROPERTIES LABELS "core;unit"
                       ENVIRONMENT "KITE_PURGE_DELAY_MS=-99999999999999999999999999999999")
endif()
# kite_internals_test(NAME SOURCE): a unit test of the core's internals, one CTest test of
# that name, linking the internals build (kite-noover-debug) and seeing src/'s headers.
function(kite_internals_test name source)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${source})
    kite_test(${name} SOURCES ${PROJECT_SOURCE_DIR}/${source} LIBS kite-noover-debug LABELS core unit)
    target_include_directories(${name} PRIVATE ${_kc})
  endif()
endfunction()

# Cases of the core only its test hooks reach.
kite_internals_test(test_core_internals tests/unit/test_core_internals.c)
# The fork-safe once-initialisation (src/once.h), alone.
kite_internals_test(core_once tests/unit/test_once.c)
# The same library without the thread pointer (types.h KITE_THREAD_KEY's fallback: a heap's
# key is its address), for the one case that differs there: heap_pool.c I-H4's pthread_self().
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/unit/test_core_internals.c)
  _kite_core_target(kite-noover-notp STATIC 0 ${KITE_TEST_DEBUG})
  target_compile_definitions(kite-noover-notp PUBLIC KITE_TEST_HOOKS=1 KITE_TEST_DEBUG=${KITE_TEST_DEBUG}
                             KITE_NO_THREAD_POINTER=1)
  add_executable(test_core_internals_notp ${PROJECT_SOURCE_DIR}/tests/unit/test_core_internals.c)
  target_include_directories(test_core_internals_notp PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/tests ${_kc})
  target_link_libraries(test_core_internals_notp PRIVATE kite-noover-notp Threads::Threads)
  add_test(NAME core_internals_notp COMMAND test_core_internals_notp
           last_round_heap_is_retired_by_the_next_holder_of_its_thread_pointer)
  set_tests_properties(core_internals_notp PROPERTIES LABELS "core;unit" TIMEOUT 120)
endif()

# Unit tests of internals no public call reaches alone (links.c, heap.c's steal pacing):
# one CTest test a name (core_<name>), each in a process of its own, so each starts from
# kite's initial state.
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/unit/test_core_links.c)
  add_executable(test_core_links ${PROJECT_SOURCE_DIR}/tests/unit/test_core_links.c)
  target_include_directories(test_core_links PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/tests ${_kc})
  target_link_libraries(test_core_links PRIVATE kite-noover-debug Threads::Threads)
  foreach(t links_carve links_guards links_trim links_fork_hooks links_entry_states
            steal_pacing_backs_off steal_pacing_find_resets classify_block_index
            pagemap_unit_none_table full_page_fast_free)
    add_test(NAME core_${t} COMMAND test_core_links ${t})
    set_tests_properties(core_${t} PROPERTIES LABELS "core;unit" TIMEOUT 120)
  endforeach()
endif()

# One 8-byte write into a page descriptor: malloc stays inside the page or stops.
kite_internals_test(core_meta_write tests/unit/test_meta_write.c)

# The remote-free protocol (src/remote.c) and the owner's take, through the internals:
# claim, push and take (R1-R4), and abandoned pages (R5).
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/unit/test_remote.c)
  kite_test(core_remote SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_remote.c
            LIBS kite-noover-debug LABELS core unit)
  target_include_directories(core_remote PRIVATE ${_kc})
  kite_test(core_remote_abandon SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_remote_abandon.c
            LIBS kite-noover-debug LABELS core unit)
  target_include_directories(core_remote_abandon PRIVATE ${_kc})
endif()

# bench/fastpath: instructions per malloc+free pair (run by bench/fastpath.sh under callgrind).
if(KITE_SANITIZE STREQUAL "" AND EXISTS ${PROJECT_SOURCE_DIR}/bench/fastpath.c)
  add_executable(kite-fastpath ${PROJECT_SOURCE_DIR}/bench/fastpath.c)
  target_compile_options(kite-fastpath PRIVATE -O2 -fno-builtin-malloc -fno-builtin-free)
endif()

# The layers: every include and every call of src/ goes downward (the calls read from the
# objects of a compile of src/ in the default, secure and valgrind builds), no cycles,
# docs/design.md's picture is current (tools/layers.py --check); and the tool's own failure
# modes (tests/tools/test_layers.py). Both keep the objects' symbols in build/layers-cache,
# so a run compiles only the sources that changed.
find_program(KITE_PYTHON3 python3)
if(KITE_SANITIZE STREQUAL "" AND KITE_PYTHON3)
  add_test(NAME tools_layers COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/layers.py --check
           --root ${PROJECT_SOURCE_DIR} --cache ${CMAKE_BINARY_DIR}/layers-cache)
  add_test(NAME test_layers COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/tools/test_layers.py
           ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/layers-cache)
  set_tests_properties(tools_layers test_layers PROPERTIES LABELS "core;tools" TIMEOUT 300)
  # after the check of the tree, whose symbols its copies of the tree then take from the
  # cache (only the files a case changes are compiled again)
  set_tests_properties(test_layers PROPERTIES DEPENDS tools_layers)
endif()

# The size rules of src/: no file above 700 lines, no function above 60 lines unless its
# comment says "Why longer:" (tools/structure.py; its allow-list names the debts still open);
# and the tool's own failure modes (tests/tools/test_structure.py).
if(KITE_SANITIZE STREQUAL "" AND KITE_PYTHON3)
  add_test(NAME tools_structure COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/structure.py
           --root ${PROJECT_SOURCE_DIR})
  add_test(NAME test_structure COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/tools/test_structure.py
           ${PROJECT_SOURCE_DIR})
  set_tests_properties(tools_structure test_structure PROPERTIES LABELS "core;tools" TIMEOUT 120)
endif()

# The docs' option and statistics tables are generated from the library's own tables
# (src/options.c, src/visit.c) by build/kite-tables and tools/gen_tables.py --write, and
# docs/design.md's lock table from the sources (tools/gen_locks.py); tools_tables fails when
# one in README.md, docs/design.md, docs/stats.md or man/kite.3 is stale, or when the
# sources break a rule of the lock table; test_gen_tables checks the tool's own failure modes.
if(TARGET kite-noover)
  add_executable(kite-tables ${_kc}/gen/kite_tables.c)
  target_include_directories(kite-tables PRIVATE ${_kc})
  target_link_libraries(kite-tables PRIVATE kite-noover)
  if(KITE_SANITIZE STREQUAL "" AND KITE_PYTHON3)
    add_test(NAME tools_tables COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/gen_tables.py --check
             --root ${PROJECT_SOURCE_DIR} --tables $<TARGET_FILE:kite-tables>)
    add_test(NAME test_gen_tables COMMAND ${KITE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/tools/test_gen_tables.py
             ${PROJECT_SOURCE_DIR} $<TARGET_FILE:kite-tables>)
    set_tests_properties(tools_tables test_gen_tables PROPERTIES LABELS "core;tools" TIMEOUT 60)
  endif()
endif()
