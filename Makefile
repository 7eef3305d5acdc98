# A thin wrapper over CMake. `make run` and `make test` work in a fresh clone: they install
# missing Debian packages (scripts/setup.sh), configure a Release build in build/, and build.
#   make install PREFIX=/opt/lpattn     (DESTDIR=... also works)

BUILD_DIR := build
ASAN_DIR := build-asan
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all setup configure build run test test-sanitize install clean

all: build

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

run: build
	./$(BUILD_DIR)/lpattn info
	./$(BUILD_DIR)/lpattn_bench --summary

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer over the test suites, in its own build tree.
test-sanitize: setup
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLPATTN_SANITIZE=ON \
	      -DLPATTN_BUILD_BENCH=OFF -DLPATTN_BUILD_CLI=OFF
	cmake --build $(ASAN_DIR) -j$(JOBS)
	ctest --test-dir $(ASAN_DIR) --output-on-failure -j$(JOBS)

install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
