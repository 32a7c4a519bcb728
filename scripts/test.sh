#!/usr/bin/env bash
# The whole test suite, from a bare machine: installs what the tests need (idempotently),
# then runs every test of the workspace. Usage: scripts/test.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."

# The tools under test run real programs: python3 (python_execute) and bash (bash tool);
# pkill/pgrep (procps) let the tests check that stopped commands are really gone.
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v bash >/dev/null 2>&1 || missing+=(bash)
command -v pgrep >/dev/null 2>&1 || missing+=(procps)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

cargo test --workspace --locked "$@"
