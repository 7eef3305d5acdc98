# A thin wrapper over CMake. `make run` and `make test` work in a fresh clone: they install
# missing Debian packages (scripts/setup.sh), configure a Release build in build/, and build.
#   make install PREFIX=/opt/lpattn     (DESTDIR=... also works)

BUILD_DIR := build
ASAN_DIR := build-asan
FUZZ_DIR := build-fuzz
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# ccache (CMakeLists.txt uses it when installed): paths under the source tree are hashed
# relative to it, so every clone of the repository shares one cache.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1

.PHONY: all setup configure build run test test-sanitize test-tsan test-fuzz fuzz install clean \
        bench bench-summary setup-aarch64 test-aarch64 test-aarch64-ci bench-aarch64

all: build

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The main job: what the library is for, in a few minutes on 2 cores: exact softmax, a
# K-interval arm (K = 4, nearest node: a clear gap), thresholded differential attention, a
# value gate and int8 operands, 3 seeds each, matched, on the default corpus; it prints the
# gap table with intervals, the attention diagnostics, and writes figures under runs/main.
# Finished runs are kept: a second `make run` only reprints the table; `rm -rf runs/main`
# starts over.
MAIN_ARMS ?= exact,kint:K=4:cal=minmax:round=nearest:ste=weight,tda,normgate,exact+qk=int8:pv=int8
MAIN_SEEDS ?= 1,2,3
MAIN_STEPS ?= 400
run: build
	./$(BUILD_DIR)/lpattn info
	./$(BUILD_DIR)/lpattn sweep --preset small --arms $(MAIN_ARMS) --seeds $(MAIN_SEEDS) \
	    --steps $(MAIN_STEPS) --out runs/main

# A short benchmark table of the kernels (GFLOPS and share of the FMA peak, median of 3).
bench-summary: build
	./$(BUILD_DIR)/lpattn_bench --summary

# The full benchmark suite (a few minutes) to build/bench.json, and a figure of it in
# build/bench.png when Debian's python3-matplotlib is installed.
bench: build
	./$(BUILD_DIR)/lpattn_bench --benchmark_out=$(BUILD_DIR)/bench.json --benchmark_out_format=json
	@if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then \
	  /usr/bin/python3 scripts/plot_bench.py $(BUILD_DIR)/bench.json $(BUILD_DIR)/bench.png; \
	else \
	  echo "bench: figure skipped: /usr/bin/python3 cannot import matplotlib" \
	       "(apt-get install python3-matplotlib); results are in $(BUILD_DIR)/bench.json"; \
	fi

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer over the test suites, in its own build tree.
test-sanitize: setup
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLPATTN_SANITIZE=ON \
	      -DLPATTN_BUILD_BENCH=OFF
	cmake --build $(ASAN_DIR) -j$(JOBS)
	ctest --test-dir $(ASAN_DIR) --output-on-failure -j$(JOBS)

# ThreadSanitizer over the kernel and trainer tests, against Debian's oneTBB source built with
# TBB_SANITIZE=thread (scripts/test_tsan.sh; not part of CI: about 20 minutes for the kernel
# tests alone on 2 cores).
test-tsan: setup
	bash scripts/test_tsan.sh build-tsan

# Differential fuzzing with libFuzzer (docs/design.md §10): the kernels against the fp64
# references, the option parsers, the config JSON, the checkpoint reader and the corpus loader,
# built with clang in build-fuzz (scripts/run_fuzzers.sh). test-fuzz is CI's short run;
# `make fuzz FUZZ_SECONDS=600` runs each target longer.
FUZZ_SECONDS ?= 600
test-fuzz: setup
	bash scripts/run_fuzzers.sh 25

fuzz: setup
	bash scripts/run_fuzzers.sh $(FUZZ_SECONDS)

# aarch64: a cross build of the library and its kernel tests, run under qemu-aarch64 on
# Highway's SVE and NEON targets (docs/design.md §11). setup-aarch64 installs the cross compiler
# and qemu-user and unpacks Debian's arm64 libraries into build-aarch64/sysroot; test-aarch64
# runs every kernel test on a CPU with SVE, then on one without (long under emulation;
# CTEST_ARGS='-R ...' narrows, LPATTN_QEMU_CPUS picks the CPUs), test-aarch64-ci the subset CI
# runs (scripts/test_aarch64.sh says which).
setup-aarch64:
	bash scripts/setup_aarch64.sh build-aarch64

test-aarch64:
	bash scripts/test_aarch64.sh build-aarch64

test-aarch64-ci:
	bash scripts/test_aarch64.sh --ci build-aarch64

# lpattn_bench cross-built and run under qemu (BENCH_ARGS: Google Benchmark's flags). Emulated
# timings are not an ARM CPU's: on an ARM machine, `make bench`.
bench-aarch64:
	BENCH_ARGS="$(BENCH_ARGS)" bash scripts/test_aarch64.sh --bench build-aarch64

install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
