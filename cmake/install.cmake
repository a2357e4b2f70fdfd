# cmake/install.cmake -- what `cmake --install build --prefix P` (and `make install PREFIX=P`)
# puts where, and the tests of it.
#
#   lib/libkite.so.X.Y.Z, libkite.so.X (SONAME), libkite.so   the library (kite::kite)
#   lib/libkite.a                                             the same, static (kite::kite-static)
#   lib/libkite-secure.so                                     when that target exists
#   include/kite.h, include/kite/buddy.h, include/kite/version.h
#   lib/pkgconfig/kite.pc                                     written at install time for P
#   lib/cmake/kite/kiteConfig.cmake, kiteConfigVersion.cmake, kiteTargets.cmake
#   bin/kite-replay, bin/kite-trace (a link into lib/kite/)
#   lib/kite/: kite-trace, kitetrace.py, libkite-trace.so, libkite-lab.so (preload-only
#              libraries, nothing links them, so they stay out of the linker's directory)
#   share/man/man3/kite.3, man1/kite-replay.1, man1/kite-trace.1
# Directories follow GNUInstallDirs (lib/<triplet> under /usr on Debian).
#
# Tests (normal build): help (every tool's -h and bad option), man (groff warnings),
# install (install into a temp prefix, build and run tests/install three ways), deb (the
# Debian packages: tests/install/test_deb.sh).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(NOT KITE_SANITIZE STREQUAL "" OR NOT TARGET kite)
  return()
endif()

set_target_properties(kite PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
set(KITE_PRIVATE_LIBDIR ${CMAKE_INSTALL_LIBDIR}/kite)

install(TARGETS kite LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET kite-static)
  install(TARGETS kite-static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(TARGET kite-secure)
  # OPTIONAL: the Debian build makes only its packaged targets, which leave it out
  install(TARGETS kite-secure LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} OPTIONAL)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/include/kite.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/kite/buddy.h ${PROJECT_BINARY_DIR}/include/kite/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kite)

# kite.pc: written at install time, so `--prefix P` (not the configure-time prefix) is in it
install(CODE "
  set(KITE_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(KITE_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(KITE_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(KITE_PC_VERSION \"${PROJECT_VERSION}\")
  set(_pc \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/kite.pc\")
  message(STATUS \"Installing: \${_pc}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/kite.pc.in\" \"\${_pc}\" @ONLY)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_pc}\")
")

# The CMake package. The targets file is written here rather than by install(EXPORT): it then
# does not depend on how the core's targets are put together inside this build.
set(KITE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kite)
file(RELATIVE_PATH KITE_REL_PREFIX /prefix/${KITE_CMAKE_DIR} /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiteConfig.cmake.in
               ${PROJECT_BINARY_DIR}/cmake-package/kiteConfig.cmake @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiteTargets.cmake.in
               ${PROJECT_BINARY_DIR}/cmake-package/kiteTargets.cmake @ONLY)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake-package/kiteConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake-package/kiteConfig.cmake
              ${PROJECT_BINARY_DIR}/cmake-package/kiteConfigVersion.cmake
              ${PROJECT_BINARY_DIR}/cmake-package/kiteTargets.cmake
        DESTINATION ${KITE_CMAKE_DIR})

# Tools
if(TARGET kite-replay)
  install(TARGETS kite-replay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
foreach(t kite-trace kite-lab)
  if(TARGET ${t})
    install(TARGETS ${t} LIBRARY DESTINATION ${KITE_PRIVATE_LIBDIR})
  endif()
endforeach()
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/kite-trace ${PROJECT_SOURCE_DIR}/tools/kitetrace.py
        DESTINATION ${KITE_PRIVATE_LIBDIR})
file(RELATIVE_PATH _kite_trace_link /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${KITE_PRIVATE_LIBDIR}/kite-trace)
install(CODE "
  set(_l \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/kite-trace\")
  message(STATUS \"Installing: \${_l} -> ${_kite_trace_link}\")
  file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  file(REMOVE \"\${_l}\")
  file(CREATE_LINK \"${_kite_trace_link}\" \"\${_l}\" SYMBOLIC)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_l}\")
")

# Man pages (plain roff, installed as they are)
install(FILES ${PROJECT_SOURCE_DIR}/man/kite.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
install(FILES ${PROJECT_SOURCE_DIR}/man/kite-replay.1 ${PROJECT_SOURCE_DIR}/man/kite-trace.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# ---- tests ----
find_program(KITE_PYTHON3 python3)
add_test(NAME help COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/test_help.sh
         ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(help PROPERTIES LABELS "tools;package" TIMEOUT 120)
add_test(NAME tools_plot COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/test_plot.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(tools_plot PROPERTIES LABELS tools TIMEOUT 300)

add_test(NAME man COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install/test_man.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(man PROPERTIES LABELS package TIMEOUT 60 SKIP_RETURN_CODE 77)

add_test(NAME install COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install/test_install.sh
         ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(install PROPERTIES LABELS package TIMEOUT 300 SKIP_RETURN_CODE 77)

# The Debian packages, built from a copy of the source tree and tested unpacked (~1.5 min on
# 2 cores; skipped without debhelper/lintian). `make deb` runs the same script.
add_test(NAME deb COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install/test_deb.sh
         ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/deb)
set_tests_properties(deb PROPERTIES LABELS package TIMEOUT 600 SKIP_RETURN_CODE 77)
