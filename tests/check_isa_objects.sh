#!/usr/bin/env bash
# Fails when an object compiled with ISA flags defines a weak symbol (an inline function or
# template instance the linker may pick for the whole program). See src/kernels/dispatch.h.
set -euo pipefail
status=0
for object in "$@"; do
  weak=$(nm --defined-only "$object" | awk '$2 ~ /^[WVuiw]$/ {print $3}')
  if [ -n "$weak" ]; then
    echo "$object exports weak symbols:"; echo "$weak" | c++filt | sed 's/^/  /'
    status=1
  fi
done
[ "$status" -eq 0 ] && echo "checked $# ISA objects: no weak symbols"
exit "$status"
