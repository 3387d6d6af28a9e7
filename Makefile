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

# Microbenchmarks of the native kernels, read against the roofs measured in the same run.
bench: build
	@./build/cpudl doctor --measure --json | python3 -c 'import json,sys; m=json.load(sys.stdin)["measured"]; print("roofs: %.1f GFLOP/s fp32 on 1 core, %.1f GB/s read on 1 core" % (m["fp32_gflops_one_core"], m["bandwidth_gbs_one_core"]))'
	@./build/bench/cpudl_bench_kernels --benchmark_counters_tabular=true

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	@rm -rf build build-debug build-asan
