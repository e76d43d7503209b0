#!/usr/bin/env bash
# format-check.sh -- fails (exit 1, naming the files) when a tracked C source or header differs from
# what clang-format makes of it under the tree's .clang-format, or has a line past its 100 columns
# (clang-format leaves long comments alone); `bash tests/format-check.sh --fix` rewrites the code.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench -name '*.[ch]')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "format-check: ${#bad[@]} of ${#files[@]} files differ from .clang-format (bash tests/format-check.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
long=$(awk 'length > 100 { print FILENAME ":" FNR ": " length " columns" }' "${files[@]}")
if [ -n "$long" ]; then
  echo "format-check: lines past 100 columns (comments are not reflowed by --fix):" >&2
  echo "$long" | sed 's/^/  /' >&2
  exit 1
fi
echo "format-check: ${#files[@]} files follow .clang-format"
