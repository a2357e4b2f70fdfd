# cmake/lab-tools.cmake -- the lab's trace tools: the trace parser (kite-trace-io), the replay
# tool (build/kite-replay), the capture shim (build/libkite-trace.so) and their tests.
# The parts that need the lab policies or the kite core are built only when those targets
# exist, so this fragment configures on its own.

add_library(kite-trace-io STATIC ${PROJECT_SOURCE_DIR}/lab/trace/trace_io.c)
target_include_directories(kite-trace-io PUBLIC ${PROJECT_SOURCE_DIR}/lab/trace)

add_executable(kite-replay ${PROJECT_SOURCE_DIR}/tools/replay.c)
target_link_libraries(kite-replay PRIVATE kite-trace-io)
if(TARGET kite-lab-policies)
  target_compile_definitions(kite-replay PRIVATE KITE_REPLAY_HAVE_POLICIES=1)
  target_include_directories(kite-replay PRIVATE ${PROJECT_SOURCE_DIR}/lab)
  target_link_libraries(kite-replay PRIVATE kite-lab-policies)
endif()
if(TARGET kite-noover)
  target_compile_definitions(kite-replay PRIVATE KITE_REPLAY_HAVE_KITE=1)
  target_include_directories(kite-replay PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(kite-replay PRIVATE kite-noover Threads::Threads)
endif()

# The capture shim: build/libkite-trace.so (never in a sanitizer build: it is preloaded).
if(KITE_SANITIZE STREQUAL "")
  add_library(kite-trace SHARED ${PROJECT_SOURCE_DIR}/tools/trace_shim.c)
  set_target_properties(kite-trace PROPERTIES C_VISIBILITY_PRESET hidden)
  target_link_libraries(kite-trace PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
endif()
