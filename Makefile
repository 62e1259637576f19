# Thin front door: every target installs what is missing, then calls meson.
BUILD ?= build
MESON_OPTS ?=
PYTHON := /usr/bin/python3

.PHONY: all deps build-deps build check unit integration asan demo demo-store bench bench-fleet fuzz install clean format

all: build

# What the tests, demo, benchmarks and fuzzers need (and the build's).
deps:
	@./scripts/install-deps test

# What building and installing need: nothing of the tests' (no slapd,
# valgrind, clang or chromium on a production host).
build-deps:
	@./scripts/install-deps build

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_OPTS)

build: deps $(BUILD)/build.ninja
	meson configure $(BUILD) -Dtests=true
	ninja -C $(BUILD)

# All tests: unit tests, fuzz corpora replays, integration tests.
check: build
	meson test -C $(BUILD) --print-errorlogs --num-processes 2
	IDCACHE_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q tests/integration

# Unit tests and fuzz replays again under ASan+UBSan.
asan: deps
	[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
	ninja -C build-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C build-asan --print-errorlogs --suite unit --suite fuzz

demo: build
	./scripts/demo $(BUILD)

demo-store: build
	./scripts/demo-store $(BUILD)

bench: build
	./scripts/bench $(BUILD)

# N idcached against one slapd, poll mode and syncrepl side by side (root;
# bench/fleet/fleet_bench.py, about 45 minutes). FLEET_OPTS=--quick: N = 10
# in a few minutes. Never part of check.
bench-fleet: build
	$(PYTHON) bench/fleet/fleet_bench.py --build $(BUILD) $(FLEET_OPTS)

fuzz: deps
	[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true -Db_lundef=false
	ninja -C build-fuzz
	./scripts/fuzz build-fuzz $${FUZZ_SECONDS:-60}

# Builds without the tests (they need cmocka) when the build directory is
# new; one that `make build` configured keeps them.
install: build-deps
	[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD) -Dtests=false $(MESON_OPTS)
	ninja -C $(BUILD)
	meson install -C $(BUILD)
	./scripts/post-install

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
