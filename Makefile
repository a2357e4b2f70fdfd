# The README's commands. CMake does the building; this file only names the jobs.
#   make         build everything into build/
#   make test    every test: the normal build, then the ASan+UBSan and TSan builds, then
#                test-clang-quick and test-cross-quick (what CI runs: .ci/run; each of the
#                last two prints that it is skipped, and why, without its tools)
#   make bench   build, then compare kite with glibc and the installed peers on the quick
#                set (one case of each shape; at most 3 minutes on 2 idle cores)
#   make bench-full  (or make bench BENCH=full) every case with every allocator found, the
#                secure build and its hardened peers included, then the seeds' HWX/SYS/OPT
#                collatz tables (about 1 s per reference run)
#                BENCH_FLAGS adds runner options (make bench BENCH_FLAGS=--docs writes
#                docs/benchmarks.md and the README's table)
#   make bench-syscalls  futex and madvise calls per run of the quick set's 8-thread rows,
#                kite and the speed peers (strace -c -f; docs/benchmarks.md's section)
#   make test-clang  the normal build with Debian's clang (-Werror) into build-clang/, and all
#                its tests but the Debian packages' (built with the default compiler) and the
#                fuzzers' (make test's normal build already makes them with clang); the Rust
#                crates and the layers check compile with clang too (CC, CXX)
#   make test-clang-quick  the part of test-clang that make test runs: the same whole build
#                with clang -Werror, then only the tests of compiled code (CLANG_QUICK_LABELS:
#                core, unit, buddy, lab, introspection, security, and CLANG_QUICK_MORE) minus
#                the page-size reruns (label platform); the tools' Python tests, the Rust crates and the install
#                checks are left to test-clang. CLANG_BUILD names the build directory. The cost on 2 cores
#                (about 195 s of CPU) is in the README's Tests section. Without clang it
#                prints that it is skipped and why.
#   make lab     the lab's seed experiments (writes docs/lab.md and its plots)
#   make lab-traces  capture the lab's large program traces (gcc, python3, perl, sqlite3) into
#                build/lab-traces/, which make lab then replays too
#   make install PREFIX=/usr/local   install the library, headers, kite.pc, the CMake package,
#                tools and man pages (cmake --install build --prefix PREFIX)
#   make rust-package  the Rust crates' .crate files (bindings/rust/package.sh: kite-sys carries
#                the C sources it compiles) into bindings/rust/target/package/; RUST_PACKAGE_FLAGS
#                goes to cargo package (e.g. --offline)
#   make deb     the Debian packages (libkite0, libkite-dev, kite-tools) into build-deb/, and
#                their test (tests/install/test_deb.sh: lintian, unpack, consumer programs)
#   make bench-rss  resident memory over time per allocator, and after 32 threads exit
#                   (docs/benchmarks.md's RSS sections)
#   make bench-hugepages  KITE_HUGEPAGES=0/1 on a random pointer chase over 1 GiB (same page)
#   make peers   build the secure build's peer hardened_malloc outside the tree
#                (tools/peer-hardened-malloc; make bench and make security run it first)
#   make cross-aarch64  64-bit Arm Linux: build-aarch64/libkite.so and libkite.a (Debian's
#                aarch64 cross toolchain, cmake/toolchains/aarch64-linux-gnu.cmake)
#   make musl    build-musl/libkite.a for static musl programs (musl-gcc -static)
#   make test-cross-quick  installs what it needs, then the aarch64 core suites once under
#                qemu-aarch64 and the musl suites linked statically
#   make test-cross  test-cross-quick, then the aarch64 cross-thread suites (core_fork
#                among them) CROSS_REPEAT (20) times more under qemu, each run bounded
#                (CROSS_REPEAT_TIMEOUT)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
# The generator flag for build directory $(1): none where the directory was configured before
# (cmake then keeps the generator its CMakeCache.txt names, and it refuses a different one, so
# a tree made by a plain `cmake -B build`, or before ninja was installed, still builds), GEN
# for a new one (tests/tools/test_make_generator.sh)
gen = $(if $(wildcard $(1)/CMakeCache.txt),,$(GEN))
PY_VENV := .venv
PY := $(PY_VENV)/bin/python

.PHONY: all build pprof test test-main test-asan test-tsan test-clang test-clang-quick clang-build uninstall cross-aarch64 musl test-cross test-cross-quick test-cross-in-test cross-deps test-cross-repeat bench bench-full bench-syscalls bench-rss bench-hugepages lab lab-traces security venv peers clean install deb rust-package

all: build

build/.configured: CMakeLists.txt
	$(CMAKE) -S . -B build $(call gen,build) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON
	@touch $@

build: build/.configured
	$(CMAKE) --build build -j $(JOBS)

venv: $(PY_VENV)/.ok
$(PY_VENV)/.ok: requirements.txt constraints.txt
	python3 -m venv $(PY_VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
	@touch $@

# Go's pprof, which the heap profiler's tests read profiles with (tools/install-pprof.sh)
pprof: build
	tools/install-pprof.sh build/gobin

test-main: build venv pprof
	cd build && PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" ctest --output-on-failure -j $(JOBS) --timeout 600

test-asan:
	$(CMAKE) -S . -B build-asan $(call gen,build-asan) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_SANITIZE=address -DKITE_WERROR=ON
	$(CMAKE) --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) --timeout 600

test-tsan:
	$(CMAKE) -S . -B build-tsan $(call gen,build-tsan) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_SANITIZE=thread -DKITE_WERROR=ON
	$(CMAKE) --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1" ctest --output-on-failure -j $(JOBS) --timeout 600

test: test-main test-asan test-tsan test-clang-quick test-cross-in-test

CLANG ?= clang
CLANG_BUILD ?= build-clang
CLANG_QUICK_LABELS := ^(core-tests|unit|buddy|lab|introspect|security|secure)$$
# the C test programs outside those labels
CLANG_QUICK_MORE := ^(prof_threads|bench-workloads|test_trace_io|api_beside)$$
clang-build: venv
	$(CMAKE) -S . -B $(CLANG_BUILD) $(call gen,$(CLANG_BUILD)) -DCMAKE_C_COMPILER=$(CLANG) -DCMAKE_CXX_COMPILER=$(CLANG)++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON -DKITE_FUZZ=OFF
	$(CMAKE) --build $(CLANG_BUILD) -j $(JOBS)
# CC and CXX: cargo's cc crate builds the Rust crates' copy of the core with clang, and
# tools/layers.py compiles src/ with it
test-clang: clang-build
	cd $(CLANG_BUILD) && CC=$(CLANG) CXX=$(CLANG)++ PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" ctest --output-on-failure -j $(JOBS) --timeout 600 -E '^deb$$'
# make test on a machine without clang: the step says so and is skipped (.ci/run installs clang)
ifeq ($(shell command -v $(CLANG) 2>/dev/null),)
test-clang-quick:
	@echo "test-clang-quick: skipped ($(CLANG) not found: apt-get install clang)"
else
test-clang-quick: clang-build
	cd $(CLANG_BUILD) && PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" ctest --output-on-failure -j $(JOBS) --timeout 600 -L '$(CLANG_QUICK_LABELS)' -LE '^platform$$'
	cd $(CLANG_BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600 -R '$(CLANG_QUICK_MORE)'
endif

# ---- other platforms (README: Platforms) ----
# What runs where: `make test` (CI: .ci/run) runs x86-64 glibc in full (normal, ASan+UBSan,
# TSan, and the clang build's quick set), then test-cross-quick: the aarch64 core suites
# once under qemu-aarch64, the fork suites and core_programs included, and the musl suites
# (about 335 s of CPU for the tests, 42 s of it the five fork suites (81 s in a run on a
# busier machine) and 22 s core_programs; about 5 minutes of 2 idle cores with the build,
# estimated). Without the
# cross tools make test says the step is skipped and which tools are missing
# (test-cross-in-test); test-cross-quick run by hand installs them (cross-deps).
# `make test-cross` runs it, then the cross-thread suites CROSS_REPEAT times more under qemu
# (test-cross-repeat: about 31 s of CPU a round, 630 s for 20), which CI runs after make test
# (.ci/run) to keep make test within 20 minutes on 2 cores.
CROSS_PKGS := gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user musl-tools
CROSS_REPEAT ?= 20
# Time limit of one test run under qemu, in seconds (cmake/toolchains/qemu-aarch64-run stops
# it and the test fails): the suites once, then each repeated cross-thread run. Both are
# several times the longest run seen under a load of 20 on 2 cores (92 s once at scale 3),
# so only a hang reaches them; CTest's own limit under the emulator (KITE_EMULATOR_TIMEOUT,
# 1800 s) stays above.
CROSS_TIMEOUT ?= 900
CROSS_REPEAT_TIMEOUT ?= 300
# under qemu-user a test program cannot start another aarch64 program by itself: the tests
# that run themselves again do it through the emulator (tests/test.h: test_exec_self), and
# those that need what qemu-user lacks print why and take the path it allows
# (tests/test.h: test_emulator_lacks)
QEMU_AARCH64 = $(shell command -v qemu-aarch64) -L /usr/aarch64-linux-gnu
# KITE_BACKGROUND=0 under qemu: with kite's idle purger thread running in a test program, a
# child it forks aborts qemu-user when a thread starts there or when it runs another program
# (tests/test.h, TEST_EMU_THREAD_AFTER_FORK); core_memory_return sets the idle mode itself
# and tests it there
CROSS_ENV = KITE_TEST_EMULATOR="$(QEMU_AARCH64)" KITE_BACKGROUND=0
# the cross-thread tests, run CROSS_REPEAT times more under qemu: threads that free each
# other's blocks, core_fork (its threads hand blocks over while two of them fork), and the
# remote-free protocol's own suites (their races staged by test hooks)
CROSS_THREADED := ^(core_threads|core_stress|core_threads_override|core_stress_override|core_fork|core_remote|core_remote_abandon)$$
# Left out under qemu: test_buddy_bench runs the benchmark binary through popen (it cannot
# start an aarch64 program under qemu-user). core_programs runs the project's own programs
# through the emulator, kite preloaded or linked, and skips Debian's x86-64 ones
# (tests/programs/run.sh). The fork suites run: under qemu their children, and kite in
# them, start no thread (test_fork.c; tests/test.h TEST_EMU_THREAD_AFTER_FORK), which
# qemu-user aborts in a child of a threaded fork; the child that hung there with no thread
# of kite's was kite's own race (secret.c: a draw in flight at the fork), fixed
CROSS_EXCLUDE := ^(test_buddy_bench)$$
cross-deps:
	@missing=""; for p in $(CROSS_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; fi

build-aarch64/.configured: CMakeLists.txt cmake/toolchains/aarch64-linux-gnu.cmake cmake/toolchains/qemu-aarch64-run
	$(CMAKE) -S . -B build-aarch64 $(call gen,build-aarch64) -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON
	@touch $@
cross-aarch64: build-aarch64/.configured
	$(CMAKE) --build build-aarch64 -j $(JOBS) --target kite kite-static

build-musl/.configured: CMakeLists.txt cmake/toolchains/musl.cmake
	$(CMAKE) -S . -B build-musl $(call gen,build-musl) -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/musl.cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON
	@touch $@
musl: build-musl/.configured
	$(CMAKE) --build build-musl -j $(JOBS) --target kite-static

# aarch64: every C test of the core (labels core-tests, unit, buddy; CTest starts each under
# qemu-aarch64) once, at the sanitizer builds' sizes; musl: the suites linked statically
# (label musl). Each build makes only what those tests run (cmake/test-targets.py: their
# programs, preloaded libraries and required files; everything where the build is not
# Ninja's): the rest of the tree (lab, benchmarks, library variants no selected test links)
# is compiled with -Werror by the normal and clang builds
CROSS_LABELS := core-tests|unit|buddy
test-cross-quick: cross-deps
	$(MAKE) cross-aarch64 musl
	t=$$(python3 cmake/test-targets.py build-aarch64 -L '$(CROSS_LABELS)' -E '$(CROSS_EXCLUDE)') && \
	  $(CMAKE) --build build-aarch64 -j $(JOBS) $${t:+--target $$t}
	cd build-aarch64 && $(CROSS_ENV) KITE_TEST_EMULATOR_TIMEOUT=$(CROSS_TIMEOUT) KITE_THREADS_SCALE=3 KITE_STRESS_SIZE="8 24 4000 2" \
	  ctest --output-on-failure -j $(JOBS) -L '$(CROSS_LABELS)' -E '$(CROSS_EXCLUDE)'
	@echo "test-cross: aarch64 suites under qemu-aarch64 passed"
	t=$$(python3 cmake/test-targets.py build-musl -L musl) && $(CMAKE) --build build-musl -j $(JOBS) $${t:+--target $$t}
	cd build-musl && ctest --output-on-failure -j $(JOBS) --timeout 900 -L musl
	@echo "test-cross: musl suites (static) passed"
# make test's step: test-cross-quick where its tools are installed, else a line that says it
# is skipped and why (make test installs nothing itself; .ci/run installs CROSS_PKGS)
CROSS_TOOLS := aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-aarch64 musl-gcc
CROSS_MISSING = $(strip $(foreach t,$(CROSS_TOOLS),$(if $(shell command -v $(t) 2>/dev/null),,$(t))) \
  $(if $(wildcard /usr/aarch64-linux-gnu/include/stdio.h),,libc6-dev-arm64-cross))
test-cross-in-test:
	@if [ -n "$(CROSS_MISSING)" ]; then \
	  echo "test-cross-quick: skipped (not found: $(CROSS_MISSING); apt-get install $(CROSS_PKGS), or make test-cross-quick, which installs them)"; \
	else $(MAKE) test-cross-quick; fi

# then the cross-thread ones CROSS_REPEAT times more (other interleavings of the threads
# that free each other's blocks), each run within CROSS_REPEAT_TIMEOUT seconds.
# test-cross-repeat is that second part alone (CI runs it after make test: .ci/run)
test-cross: test-cross-quick
	$(MAKE) test-cross-repeat
test-cross-repeat: cross-deps
	$(MAKE) cross-aarch64
	t=$$(python3 cmake/test-targets.py build-aarch64 -R '$(CROSS_THREADED)') && \
	  $(CMAKE) --build build-aarch64 -j $(JOBS) $${t:+--target $$t}
	cd build-aarch64 && $(CROSS_ENV) KITE_TEST_EMULATOR_TIMEOUT=$(CROSS_REPEAT_TIMEOUT) KITE_THREADS_SCALE=1 KITE_STRESS_SIZE="8 16 2000 2" \
	  ctest --output-on-failure -j $(JOBS) --repeat until-fail:$(CROSS_REPEAT) -R '$(CROSS_THREADED)'
	@echo "test-cross: aarch64 cross-thread suites $(CROSS_REPEAT) times under qemu-aarch64 passed"


BENCH ?= quick
BENCH_FLAGS ?=
bench: build venv peers
ifeq ($(BENCH),full)
	$(PY) bench/run.py $(BENCH_FLAGS)
	$(PY) bench/seed_tables.py --build-dir build
else
	$(PY) bench/run.py --quick $(BENCH_FLAGS)
endif

bench-full:
	$(MAKE) bench BENCH=full

bench-syscalls: build venv
	$(PY) bench/run.py --quick --syscalls --docs

bench-rss: build venv
	$(PY) bench/rss_timeline.py --docs --reps 3
	$(PY) bench/ops_figures.py exit-rss --docs

bench-hugepages: build venv
	$(PY) bench/ops_figures.py hugepages --docs

lab: build venv
	$(PY) tools/lab.py

lab-traces: build venv
	$(PY) tools/kite-lab-traces

PREFIX ?= /usr/local
install: build
	$(CMAKE) --install build --prefix $(PREFIX)

# removes what `make install PREFIX=P` installed, by the list cmake wrote (build/install_manifest.txt),
# then the directories of kite's own that are left empty
uninstall:
	@test -f build/install_manifest.txt || { echo "make uninstall: build/install_manifest.txt not found (make install first)"; exit 1; }
	bash tools/uninstall.sh build/install_manifest.txt $(PREFIX)

rust-package:
	bash bindings/rust/package.sh $(RUST_PACKAGE_FLAGS)

deb:
	bash tests/install/test_deb.sh $(CURDIR) build-deb

clean:
	rm -rf build build-asan build-tsan build-clang build-deb build-aarch64 build-musl

# GrapheneOS's hardened_malloc (default configuration) from the crates.io package that ships
# its sources, built into ~/.cache/kite-peers once; says why and goes on when it cannot
# (no cargo, no network): the runners then list it as skipped
peers:
	-tools/peer-hardened-malloc

# the security matrix: every misuse case of tests/security/ under kite and each installed
# allocator (scudo from libclang-rt-14-dev and hardened_malloc included) -> docs/security.md
security: build venv peers
	$(PY) tools/security_matrix.py --docs
