# Build with musl libc (Debian's musl-tools: the musl-gcc wrapper) for static programs:
# build-musl/libkite.a is linked into `musl-gcc -static` programs, where its malloc family
# replaces musl's. Only the C parts are built (musl-gcc has no C++ library).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER musl-gcc)
set(CMAKE_EXE_LINKER_FLAGS_INIT -static)
set(KITE_MUSL ON CACHE BOOL "musl build: the core, linked statically into its tests")
