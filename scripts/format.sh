#!/usr/bin/env bash
# clang-format over every hand-written C++ file (.clang-format at the root). Generated tables are
# left as their scripts write them (ctests compare them byte for byte with the scripts' output).
#   scripts/format.sh          rewrites the files in place (make format)
#   scripts/format.sh --check  lists the files that are not formatted and fails (ctest tree_is_formatted)
set -euo pipefail
cd "$(dirname "$0")/.."
generated='^(src/kernels/simd/math_tables\.inl|src/llm/tokenizer/unicode_tables\.cpp)$'
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.inl' | grep -Ev "$generated")
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ "${#bad[@]}" -gt 0 ]; then
    printf 'not formatted (run make format): %s\n' "${bad[@]}"
    exit 1
  fi
  echo "checked ${#files[@]} files: all formatted"
else
  clang-format -i "${files[@]}"
fi
