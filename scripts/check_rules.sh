#!/usr/bin/env bash
# The rules ARCHITECTURE.md writes down, kept:
# - every row of its block that follows "The same rules as greps, one per row; each prints
#   nothing:" prints nothing. The rows are read from ARCHITECTURE.md as it stands, so the
#   document stays their one source: a rule added or changed there is checked from then on;
#   a row that names a file no longer there prints grep's complaint, and so fails too;
# - no cycle between the top-level modules of the engine (actors/src) nor of the host
#   (src), and the engine's protocol.rs in no cycle of files (scripts/import_cycles.py).
# Prints each broken rule with what it printed, and exits 1 if any; needs bash, awk and
# python3 only, and takes a second, so scripts/test.sh runs it first.
# Usage: scripts/check_rules.sh
set -uo pipefail
cd "$(dirname "$0")/.."

marker='The same rules as greps, one per row; each prints nothing:'
rows=$(awk -v marker="$marker" '
  $0 == marker { found = 1; next }
  found && /^```/ { if (inside) exit; inside = 1; next }
  inside { print }
' ARCHITECTURE.md)
if [ -z "$rows" ]; then
  echo "check_rules.sh: ARCHITECTURE.md has no block of greps after \"$marker\"" >&2
  exit 1
fi

broken=0
greps=0
while IFS= read -r rule; do
  [ -n "$rule" ] || continue
  greps=$((greps + 1))
  printed=$(bash -c "$rule" 2>&1 </dev/null)
  if [ -n "$printed" ]; then
    echo "check_rules.sh: broken rule (ARCHITECTURE.md): $rule" >&2
    sed 's/^/    /' <<<"$printed" >&2
    broken=$((broken + 1))
  fi
done <<<"$rows"

cycles() {
  local printed
  if ! printed=$(python3 scripts/import_cycles.py "$@" --check 2>&1); then
    echo "check_rules.sh: broken rule: import cycles in $1 (python3 scripts/import_cycles.py $* --check)" >&2
    sed 's/^/    /' <<<"$printed" >&2
    broken=$((broken + 1))
  fi
}
cycles actors/src --file protocol.rs --modules
cycles src --modules

if [ "$broken" -gt 0 ]; then
  echo "check_rules.sh: $broken broken rule(s)" >&2
  exit 1
fi
echo "check_rules.sh: the $greps greps of ARCHITECTURE.md print nothing; no module cycle in actors/src or src" >&2
