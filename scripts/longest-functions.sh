#!/usr/bin/env bash
# Prints the longest functions under the given folders (default: src), longest first, and
# exits 1 when any exceeds the limit. Lengths come from Universal Ctags (the Debian package
# universal-ctags): from a function's first line to its closing brace, comments included;
# lambdas count inside the function that holds them.
# Usage: scripts/longest-functions.sh [--limit N] [--top K] [DIR...]   (defaults: 100, 10, src)
set -euo pipefail
limit=100
top=10
dirs=()
while (($#)); do
  case $1 in
    --limit) limit=$2; shift 2 ;;
    --top) top=$2; shift 2 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
((${#dirs[@]})) || dirs=(src)
command -v ctags >/dev/null || { echo "longest-functions: needs ctags (apt-get install universal-ctags)" >&2; exit 2; }
ctags --version | grep -q "Universal Ctags" || { echo "longest-functions: needs Universal Ctags" >&2; exit 2; }
table=$(find "${dirs[@]}" \( -name '*.cpp' -o -name '*.h' -o -name '*.cc' \) -print0 | sort -z |
  xargs -0 ctags --languages=C++ --c++-kinds=f --fields=+ne -o - 2>/dev/null |
  awk -F'\t' '$1 !~ /^__anon/ {
      line = ""; end = "";
      for (i = 4; i <= NF; ++i) { if ($i ~ /^line:/) line = substr($i, 6); if ($i ~ /^end:/) end = substr($i, 5) }
      if (line != "" && end != "") printf "%d\t%s:%s\t%s\n", end - line + 1, $2, line, $1 }' |
  sort -t$'\t' -k1,1nr -k2,2)
# awk reads the whole table: `head` would leave printf writing to a closed pipe (SIGPIPE, a
# failure under pipefail) once the table outgrows the pipe's buffer.
printf '%s\n' "$table" | awk -F'\t' -v top="$top" 'NR <= top { printf "%5d  %-60s %s\n", $1, $2, $3 }'
over=$(printf '%s\n' "$table" | awk -F'\t' -v l="$limit" '$1 > l' | wc -l)
if [ "$over" -gt 0 ]; then
  echo "longest-functions: $over function(s) over $limit lines" >&2
  exit 1
fi
echo "longest-functions: none over $limit lines"
