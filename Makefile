# cpudl entry points. Each target first makes sure the Debian packages it needs are installed.
.PHONY: deps build test test-asan demo bench clean format

JOBS ?= $(shell nproc)

deps:
	@scripts/install-deps.sh

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

test: build
	@ctest --preset release -j $(JOBS)

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (CI runs both).
test-asan: deps
	@cmake --preset asan-ubsan >/dev/null
	@cmake --build --preset asan-ubsan -j $(JOBS)
	@ctest --preset asan-ubsan -j $(JOBS)

# The main job. Until `cpudl train` lands, the machine report with its measured roofs.
demo: build
	@./build/cpudl doctor --measure

# Every compute-core benchmark in one run (roofs, GEMM with each BLAS, convolutions, native
# kernels), written to docs/BENCHMARKS.md. Installs OpenBLAS and BLIS to compare against.
bench: build
	@scripts/install-deps.sh --bench
	@bench/run-benchmarks.sh

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf build build-debug build-asan
