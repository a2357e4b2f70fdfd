# cmake/fuzz.cmake -- coverage-guided fuzzers (libFuzzer), built with clang whatever the main
# compiler is.
#
#   build/fuzz/fuzz_kite     op sequences on the kite_* API (kite-noover sources, KITE_DEBUG>=2)
#   build/fuzz/fuzz_buddy    the buddy page heap against a unit-state reference model
#   build/fuzz/fuzz_trace    the trace/.script parser fed arbitrary bytes
#   build/fuzz/fuzz_policy   op sequences against every lab policy
#   build/fuzz/fuzz_misuse_secure, build/fuzz/fuzz_misuse   misuse (double frees from two
#                            threads, writes after free, overflows) on the secure and the
#                            default build: no overlap, nothing foreign returned
#
# Each is compiled with -fsanitize=fuzzer,address,undefined by custom commands that call clang
# directly (the main build usually uses gcc, which has no libFuzzer), so nothing here touches
# the other targets. CTest runs each fuzzer briefly (test_fuzz_<name>: the regression inputs
# under tests/fuzz/regress/<name>/, then a bounded run from tests/fuzz/corpus/<name>/), normal
# build only: the fuzzers carry ASan+UBSan themselves. docs/fuzzing.md has the long-run
# commands. Without clang or its libFuzzer runtime the fuzzers are skipped with a message.
# KITE_FUZZ=OFF leaves them out: the clang builds (make test-clang) do, as their fuzzers would
# be the very programs the GCC build's clang rules already make and run.
option(KITE_FUZZ "build and run the libFuzzer targets (needs clang with libFuzzer)" ON)
if(NOT KITE_SANITIZE STREQUAL "" OR NOT KITE_FUZZ)
  return()
endif()

find_program(KITE_FUZZ_CC NAMES clang clang-19 clang-16 clang-15 clang-14)
set(_kf_san -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
set(_kf_dir ${CMAKE_BINARY_DIR}/fuzz)

# The probe's success is cached; a failure is not, so installing clang later and re-running
# cmake picks the fuzzers up.
if(KITE_FUZZ_CC AND NOT KITE_FUZZ_OK)
  file(WRITE ${_kf_dir}/probe.c
       "#include <stdint.h>\n#include <stddef.h>\n"
       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n > 99; }\n")
  execute_process(COMMAND ${KITE_FUZZ_CC} -fsanitize=fuzzer ${_kf_san} ${_kf_dir}/probe.c
                          -o ${_kf_dir}/probe
                  RESULT_VARIABLE _kf_rc OUTPUT_QUIET ERROR_QUIET)
  if(_kf_rc EQUAL 0)
    set(KITE_FUZZ_OK ON CACHE INTERNAL "clang can link libFuzzer+ASan+UBSan programs")
  endif()
endif()

if(NOT KITE_FUZZ_CC OR NOT KITE_FUZZ_OK)
  message(STATUS "kite: fuzz tests skipped (needs clang with libFuzzer: "
                 "apt-get install clang libclang-rt-14-dev)")
  return()
endif()
message(STATUS "kite: fuzzers built with ${KITE_FUZZ_CC}")

# Depfiles name their object by absolute path; under the old policy Ninja expects the path as
# written in build.ninja, finds a mismatch and rebuilds every fuzz object on every build. The
# new policy (CMake >= 3.20) has the generator translate the depfile, so a build with nothing
# changed does no work.
if(POLICY CMP0116)
  cmake_policy(SET CMP0116 NEW)
endif()

# _kite_fuzz_target(NAME MAIN main.c SOURCES other.c... INCLUDES dirs... DEFINES defs...)
# Objects are compiled one by one (header dependencies via depfiles); only the fuzzer's own
# source is compiled with -Werror: clang may warn on other components' code where gcc does not,
# and that must not break the build.
# SAN (optional) replaces the sanitizers (default ASan+UBSan): the misuse fuzzers write into
# freed blocks on purpose, which ASan would stop before kite could.
function(_kite_fuzz_target name)
  cmake_parse_arguments(F "" "MAIN" "SOURCES;INCLUDES;DEFINES;SAN" ${ARGN})
  if(NOT F_SAN)
    set(F_SAN ${_kf_san})
  endif()
  set(cflags -std=gnu11 -g -O1 -pthread -fsanitize=fuzzer-no-link ${F_SAN}
             -Wall -Wextra -Wno-unused-parameter)
  foreach(d ${F_INCLUDES})
    list(APPEND cflags -I${d})
  endforeach()
  foreach(d ${F_DEFINES})
    list(APPEND cflags -D${d})
  endforeach()
  set(objs)
  foreach(src ${F_MAIN} ${F_SOURCES})
    get_filename_component(base ${src} NAME_WE)
    set(obj ${_kf_dir}/${name}.dir/${base}.o)
    set(extra)
    if(src STREQUAL F_MAIN AND KITE_WERROR)
      set(extra -Werror)
    endif()
    add_custom_command(OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${_kf_dir}/${name}.dir
      COMMAND ${KITE_FUZZ_CC} ${cflags} ${extra} -MD -MF ${obj}.d -c ${src} -o ${obj}
      DEPENDS ${src} DEPFILE ${obj}.d
      COMMENT "Building fuzz object ${name}/${base}.o (clang)" VERBATIM)
    list(APPEND objs ${obj})
  endforeach()
  add_custom_command(OUTPUT ${_kf_dir}/${name}
    COMMAND ${KITE_FUZZ_CC} -fsanitize=fuzzer ${F_SAN} -pthread ${objs} -o ${_kf_dir}/${name}
    DEPENDS ${objs} COMMENT "Linking fuzzer ${name} (clang)" VERBATIM)
  add_custom_target(${name} ALL DEPENDS ${_kf_dir}/${name})
  add_test(NAME test_${name} COMMAND sh ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzz.sh
           ${_kf_dir}/${name} ${PROJECT_SOURCE_DIR}/tests/fuzz ${_kf_dir}/work-${name}
           ${KITE_FUZZ_RUNS} ${KITE_FUZZ_SECONDS})
  set_tests_properties(test_${name} PROPERTIES LABELS fuzz TIMEOUT 120)
  set_property(GLOBAL APPEND PROPERTY KITE_FUZZ_TARGETS ${name})
endfunction()

# The CTest run of each fuzzer (<= 20 s each, 4 fuzzers: within the 90 s budget even serially).
set(KITE_FUZZ_RUNS 200000 CACHE STRING "libFuzzer -runs for each fuzzer's CTest run")
set(KITE_FUZZ_SECONDS 20 CACHE STRING "libFuzzer -max_total_time for each fuzzer's CTest run")

set(_kf_src ${PROJECT_SOURCE_DIR}/tests/fuzz)
set(_kf_inc ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include ${PROJECT_SOURCE_DIR}/tests)

if(DEFINED KITE_CORE_SOURCES AND EXISTS ${_kf_src}/fuzz_kite.c)
  set(_kf_dbg ${KITE_DEBUG})
  if(_kf_dbg LESS 2)
    set(_kf_dbg 2)
  endif()
  _kite_fuzz_target(fuzz_kite MAIN ${_kf_src}/fuzz_kite.c SOURCES ${KITE_CORE_SOURCES}
                    INCLUDES ${_kf_inc} ${PROJECT_SOURCE_DIR}/src
                    DEFINES KITE_OVERRIDE=0 KITE_DEBUG=${_kf_dbg})
endif()

# The misuse fuzzers (tests/fuzz/fuzz_misuse.c): the secure build (its test hook counts the
# reports instead of aborting) and the default build (every misuse op but the overflow,
# FUZZ_MISUSE_ALL). UBSan only: see SAN above.
if(DEFINED KITE_CORE_SOURCES AND EXISTS ${_kf_src}/fuzz_misuse.c)
  set(_kf_ub -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  _kite_fuzz_target(fuzz_misuse_secure MAIN ${_kf_src}/fuzz_misuse.c
                    SOURCES ${KITE_CORE_SOURCES} ${PROJECT_SOURCE_DIR}/src/secure.c ${PROJECT_SOURCE_DIR}/src/secure_large.c
                    INCLUDES ${_kf_inc} ${PROJECT_SOURCE_DIR}/src SAN ${_kf_ub}
                    DEFINES KITE_OVERRIDE=0 KITE_DEBUG=1 KITE_SECURE=1 KITE_TEST_HOOKS=1 FUZZ_SECURE=1)
  _kite_fuzz_target(fuzz_misuse MAIN ${_kf_src}/fuzz_misuse.c SOURCES ${KITE_CORE_SOURCES}
                    INCLUDES ${_kf_inc} ${PROJECT_SOURCE_DIR}/src SAN ${_kf_ub}
                    DEFINES KITE_OVERRIDE=0 KITE_DEBUG=1 FUZZ_MISUSE_ALL=1)
endif()

if(EXISTS ${_kf_src}/fuzz_buddy.c)
  _kite_fuzz_target(fuzz_buddy MAIN ${_kf_src}/fuzz_buddy.c
                    SOURCES ${PROJECT_SOURCE_DIR}/src/buddy.c ${PROJECT_SOURCE_DIR}/src/buddy_range.c INCLUDES ${_kf_inc})
endif()

if(EXISTS ${_kf_src}/fuzz_trace.c)
  _kite_fuzz_target(fuzz_trace MAIN ${_kf_src}/fuzz_trace.c
                    SOURCES ${PROJECT_SOURCE_DIR}/lab/trace/trace_io.c
                    INCLUDES ${_kf_inc} ${PROJECT_SOURCE_DIR}/lab/trace)
endif()

if(DEFINED KITE_LAB_POLICY_SOURCES AND EXISTS ${_kf_src}/fuzz_policy.c)
  set(_kf_pol)
  foreach(s ${KITE_LAB_POLICY_SOURCES})
    if(IS_ABSOLUTE ${s})
      list(APPEND _kf_pol ${s})
    else()
      list(APPEND _kf_pol ${PROJECT_SOURCE_DIR}/${s})
    endif()
  endforeach()
  _kite_fuzz_target(fuzz_policy MAIN ${_kf_src}/fuzz_policy.c SOURCES ${_kf_pol}
                    INCLUDES ${_kf_inc} ${PROJECT_SOURCE_DIR}/lab)
endif()
