#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time on the
# committed seed corpus. Usage: run_fuzzers.sh SOURCE_DIR BUILD_DIR SECONDS
set -euo pipefail
src=$1 out=$2 seconds=${3:-10}
mkdir -p "$out"
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$src/include" -I"$src/src")
clang++ "${flags[@]}" "$src/fuzz/idx_fuzz.cpp" "$src/src/data/idx.cpp" -lz -o "$out/idx_fuzz"
clang++ "${flags[@]}" "$src/fuzz/safetensors_fuzz.cpp" "$src/src/io/safetensors_header.cpp" "$src/src/io/file_kind.cpp" "$src/src/tensor/storage.cpp" "$src/src/runtime/block_cache.cpp" -o "$out/safetensors_fuzz"
clang++ "${flags[@]}" -DONNX_NAMESPACE=onnx -DONNX_ML=1 "$src/fuzz/onnx_fuzz.cpp" "$src/src/infer/onnx_loader.cpp" \
  "$src/src/infer/graph.cpp" "$src/src/tensor/storage.cpp" "$src/src/runtime/block_cache.cpp" "$src/src/io/atomic_file.cpp" "$src/src/io/file_kind.cpp" -lonnx_proto -lprotobuf -o "$out/onnx_fuzz"
clang++ "${flags[@]}" "$src/fuzz/gguf_fuzz.cpp" "$src/src/llm/gguf/gguf.cpp" "$src/src/llm/gguf/ggml_types.cpp" \
  "$src/src/io/atomic_file.cpp" "$src/src/io/file_kind.cpp" -o "$out/gguf_fuzz"
clang++ "${flags[@]}" "$src/fuzz/serve_request_fuzz.cpp" "$src/src/serve/tensor_json.cpp" "$src/src/data/image_decode.cpp" \
  "$src/src/tensor/storage.cpp" "$src/src/runtime/block_cache.cpp" -lz -lsimdjson -lpng16 -lturbojpeg -o "$out/serve_request_fuzz"
for target in idx safetensors onnx gguf serve_request; do
  corpus="$out/corpus_$target"
  mkdir -p "$corpus"
  cp "$src/tests/fuzz_corpus/${target%_request}/"* "$corpus/"
  "$out/${target}_fuzz" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 -artifact_prefix="$out/" "$corpus" > "$out/$target.log" 2>&1 || { tail -30 "$out/$target.log"; exit 1; }
  tail -4 "$out/$target.log"
done
echo "fuzzed idx, safetensors, onnx, gguf and the server's requests for ${seconds}s each: no crash"
