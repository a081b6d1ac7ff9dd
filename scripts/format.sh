#!/usr/bin/env bash
# The C++ layout (.clang-format) over every tracked .cc and .h file.
#   bash scripts/format.sh          rewrite the files that differ
#   bash scripts/format.sh --check  change nothing; list the files that differ, exit 1 if any
# Layouts differ between clang-format releases: the check runs only with the major version the
# tree was formatted with (Debian bookworm's, 14), and says so and passes with another.
set -euo pipefail
cd "$(dirname "$0")/.."
want=14
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format.sh: clang-format is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
have=$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--check" ]; then
  if [ "$have" != "$want" ]; then
    echo "format.sh: clang-format $have here, the tree's layout is clang-format $want's: not checked"
    exit 0
  fi
  bad=()
  for f in "${files[@]}"; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if ((${#bad[@]})); then
    echo "format.sh: ${#bad[@]} file(s) differ from .clang-format's layout (run bash scripts/format.sh):"
    printf '  %s\n' "${bad[@]}"
    exit 1
  fi
  echo "format.sh: ${#files[@]} files follow .clang-format"
  exit 0
fi
clang-format -i "${files[@]}"
