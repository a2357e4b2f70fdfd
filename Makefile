# The README's commands. CMake does the building; this file only names the jobs.
#   make         build everything into build/
#   make test    every test: the normal build, then the ASan+UBSan and TSan builds
#   make bench   build, then compare kite with glibc and the installed peers (short size),
#                then the seeds' HWX/SYS/OPT collatz tables (about 1 s per reference run)
#   make test-clang  the normal build with Debian's clang (-Werror) into build-clang/, and its
#                tests (the package tests left out: the packages are built with the default
#                compiler)
#   make lab     the lab's seed experiments (writes docs/lab.md and its plots)
#   make lab-traces  capture the lab's large program traces (gcc, python3, perl, sqlite3) into
#                build/lab-traces/, which make lab then replays too
#   make install PREFIX=/usr/local   install the library, headers, kite.pc, the CMake package,
#                tools and man pages (cmake --install build --prefix PREFIX)
#   make deb     the Debian packages (libkite0, libkite-dev, kite-tools) into build-deb/, and
#                their test (tests/install/test_deb.sh: lintian, unpack, consumer programs)
#   make bench-rss  resident memory over time per allocator, and after 32 threads exit
#                   (docs/benchmarks.md's RSS sections)
#   make bench-hugepages  KITE_HUGEPAGES=0/1 on a random pointer chase over 1 GiB (same page)
#   make peers   build the secure build's peer hardened_malloc outside the tree
#                (tools/peer-hardened-malloc; make bench and make security run it first)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
PY_VENV := .venv
PY := $(PY_VENV)/bin/python

.PHONY: all build test test-main test-asan test-tsan test-clang uninstall bench bench-rss bench-hugepages lab lab-traces security venv peers clean install deb

all: build

build/.configured: CMakeLists.txt
	$(CMAKE) -S . -B build $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON
	@touch $@

build: build/.configured
	$(CMAKE) --build build -j $(JOBS)

venv: $(PY_VENV)/.ok
$(PY_VENV)/.ok: requirements.txt constraints.txt
	python3 -m venv $(PY_VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
	@touch $@

test-main: build venv
	cd build && PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" ctest --output-on-failure -j $(JOBS) --timeout 600

test-asan:
	$(CMAKE) -S . -B build-asan $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_SANITIZE=address -DKITE_WERROR=ON
	$(CMAKE) --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) --timeout 600

test-tsan:
	$(CMAKE) -S . -B build-tsan $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_SANITIZE=thread -DKITE_WERROR=ON
	$(CMAKE) --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ctest --output-on-failure -j $(JOBS) --timeout 600

test: test-main test-asan test-tsan

CLANG ?= clang
test-clang: venv
	$(CMAKE) -S . -B build-clang $(GEN) -DCMAKE_C_COMPILER=$(CLANG) -DCMAKE_CXX_COMPILER=$(CLANG)++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKITE_WERROR=ON
	$(CMAKE) --build build-clang -j $(JOBS)
	cd build-clang && PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" ctest --output-on-failure -j $(JOBS) --timeout 600 -E '^deb$$'

bench: build venv peers
	$(PY) bench/run.py
	$(PY) bench/seed_tables.py --build-dir build

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

deb:
	bash tests/install/test_deb.sh $(CURDIR) build-deb

clean:
	rm -rf build build-asan build-tsan build-clang build-deb

# GrapheneOS's hardened_malloc (default configuration) from the crates.io package that ships
# its sources, built into ~/.cache/kite-peers once; says why and goes on when it cannot
# (no cargo, no network): the runners then list it as skipped
peers:
	-tools/peer-hardened-malloc

# the security matrix: every misuse case of tests/security/ under kite and each installed
# allocator (scudo from libclang-rt-14-dev and hardened_malloc included) -> docs/security.md
security: build venv peers
	$(PY) tools/security_matrix.py --docs
