# cmake/install.cmake -- what `cmake --install build --prefix P` (and `make install PREFIX=P`)
# puts where, and the tests of it.
#
#   lib/libkite.so.X.Y.Z, libkite.so.X (SONAME), libkite.so   the library (kite::kite)
#   lib/libkite.a                                             the same, static (kite::kite-static)
#   lib/libkite-secure.so.X.Y.Z, .so.X, .so                   the secure build (preload it)
#   lib/libkite-api.so.X.Y.Z, .so.X, .so                      the kite_* API without the malloc
#                                                             override (kite::kite-api, kite-api.pc)
#   include/kite.h, include/kite/buddy.h, include/kite/version.h
#   lib/pkgconfig/kite.pc, kite-api.pc                        written at install time for P
#   lib/cmake/kite/kiteConfig.cmake, kiteConfigVersion.cmake, kiteTargets.cmake
#   bin/kite-replay; bin/kite-trace, bin/kite-lab, bin/kite-stats (links into lib/kite/)
#   lib/kite/: kite-trace, kitetrace.py, libkite-trace.so, libkite-lab.so (preload-only
#              libraries, nothing links them, so they stay out of the linker's directory);
#              kite-lab and its modules (advise.py, kitecommon.py, kitesites.py,
#              kitewindow.py, bench/run.py for the allocator discovery), kite-stats; links
#              kite-replay, libkite.so, libkite-secure.so, so that lib/kite/ is the build
#              directory the installed kite-lab advise uses
#   share/man/man3/kite.3, man1/kite-replay.1, kite-trace.1, kite-lab.1, kite-stats.1
# Directories follow GNUInstallDirs (lib/<triplet> under /usr on Debian).
#
# Tests (normal build): help (every tool's -h and bad option), make_generator (the
# Makefile keeps an existing build directory's generator), man (groff warnings),
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
foreach(t kite-secure kite-api)
  if(TARGET ${t})
    set_target_properties(${t} PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
    install(TARGETS ${t} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endforeach()
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
  set(_pc \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/kite-api.pc\")
  message(STATUS \"Installing: \${_pc}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/kite-api.pc.in\" \"\${_pc}\" @ONLY)
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
                 ${PROJECT_SOURCE_DIR}/tools/kite-lab ${PROJECT_SOURCE_DIR}/tools/kite-stats
        DESTINATION ${KITE_PRIVATE_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/tools/advise.py ${PROJECT_SOURCE_DIR}/tools/kitecommon.py
              ${PROJECT_SOURCE_DIR}/tools/kitesites.py ${PROJECT_SOURCE_DIR}/tools/kitewindow.py
              ${PROJECT_SOURCE_DIR}/tools/kiteprof.py
        DESTINATION ${KITE_PRIVATE_LIBDIR})
install(PROGRAMS ${PROJECT_SOURCE_DIR}/bench/run.py DESTINATION ${KITE_PRIVATE_LIBDIR}/bench)
# kite_install_link(LINK_DIR NAME TARGET_PATH): LINK_DIR/NAME -> TARGET_PATH (both relative to
# the prefix; the link is relative, so the tree can be moved)
function(kite_install_link dir name target)
  file(RELATIVE_PATH rel /prefix/${dir} /prefix/${target})
  install(CODE "
    set(_l \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${dir}/${name}\")
    message(STATUS \"Installing: \${_l} -> ${rel}\")
    file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${dir}\")
    file(REMOVE \"\${_l}\")
    file(CREATE_LINK \"${rel}\" \"\${_l}\" SYMBOLIC)
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${_l}\")
  ")
endfunction()
foreach(t kite-trace kite-lab kite-stats)
  kite_install_link(${CMAKE_INSTALL_BINDIR} ${t} ${KITE_PRIVATE_LIBDIR}/${t})
endforeach()
kite_install_link(${KITE_PRIVATE_LIBDIR} kite-replay ${CMAKE_INSTALL_BINDIR}/kite-replay)
kite_install_link(${KITE_PRIVATE_LIBDIR} libkite.so ${CMAKE_INSTALL_LIBDIR}/libkite.so.${PROJECT_VERSION_MAJOR})
if(TARGET kite-secure)
  kite_install_link(${KITE_PRIVATE_LIBDIR} libkite-secure.so
                    ${CMAKE_INSTALL_LIBDIR}/libkite-secure.so.${PROJECT_VERSION_MAJOR})
endif()

# Man pages (plain roff, installed as they are)
install(FILES ${PROJECT_SOURCE_DIR}/man/kite.3 DESTINATION ${CMAKE_INSTALL_MANDIR}/man3)
install(FILES ${PROJECT_SOURCE_DIR}/man/kite-replay.1 ${PROJECT_SOURCE_DIR}/man/kite-trace.1
              ${PROJECT_SOURCE_DIR}/man/kite-lab.1 ${PROJECT_SOURCE_DIR}/man/kite-stats.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# ---- tests ----
find_program(KITE_PYTHON3 python3)
add_test(NAME help COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/test_help.sh
         ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(help PROPERTIES LABELS "tools;package" TIMEOUT 120)
# the Makefile keeps the generator of a build directory configured before (any of its six)
add_test(NAME make_generator COMMAND bash ${PROJECT_SOURCE_DIR}/tests/tools/test_make_generator.sh
         ${PROJECT_SOURCE_DIR})
set_tests_properties(make_generator PROPERTIES LABELS tools TIMEOUT 120 SKIP_RETURN_CODE 77)
# libkite-api: the kite_* API beside the C library's malloc (tests/install/api_beside.c)
if(TARGET kite-api)
  kite_test(api_beside SOURCES ${PROJECT_SOURCE_DIR}/tests/install/api_beside.c LIBS kite-api ${CMAKE_DL_LIBS}
            LABELS package)
endif()
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
