#!/usr/bin/env bash
# The code checks CI runs before the tests: every C++ file under src/ formatted as
# .clang-format says (clang-format from Debian), and no function under src/ longer than 100
# lines (scripts/longest-functions.sh prints the longest ten). -Wswitch-enum is part of the
# build of src/ itself (an error in CI, which builds with warnings as errors).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
status=0
mapfile -t files < <(find src -name '*.cpp' -o -name '*.h' | sort)
if ! clang-format --dry-run -Werror "${files[@]}" 2>check-format.log; then
  echo "check: these files are not formatted (clang-format -i FILE):" >&2
  grep -oE '^[^:]+\.(cpp|h)' check-format.log | sort -u | sed 's/^/  /' >&2
  status=1
fi
rm -f check-format.log
echo "check: clang-format: ${#files[@]} files under src/"
scripts/longest-functions.sh --limit 100 --top 10 src || status=1
exit "$status"
