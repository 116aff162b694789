#!/usr/bin/env bash
# Usage: tests/python/venv.sh <venv-dir> <requirements-file>
#
# Makes <venv-dir> a Python venv holding exactly the pinned <requirements-file>: creates the venv when
# it is missing, installs the requirements, and remembers the file's hash inside the venv so the next
# call with the same file does nothing (a warm CI run pays no pip at all). A changed file installs again.
#
# Exit status: 0 ready; 2 python3, its venv module or pip is not available here (the reason on stderr:
# callers skip, or fail when they must have Python); 3 the requirements could not be installed (no
# PyPI, a pin this Python cannot take; pip's last lines on stderr); 64 wrong usage.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <venv-dir> <requirements-file>" >&2
  exit 64
fi
venv=$1
requirements=$2
if [ ! -r "$requirements" ]; then
  echo "venv.sh: cannot read the requirements file $requirements" >&2
  exit 64
fi

python=${PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "no $python on PATH" >&2
  exit 2
fi

hash_of() { sha256sum "$1" | cut -d' ' -f1; }
wanted=$(hash_of "$requirements")
stamp="$venv/.berth-requirements.sha256"
if [ -x "$venv/bin/python" ] && [ -r "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! out=$("$python" -m venv "$venv" 2>&1); then
    rm -rf "$venv"
    echo "$python cannot make a venv (on Debian: apt-get install python3-venv): $(echo "$out" | tail -1)" >&2
    exit 2
  fi
fi
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  echo "the venv made by $python has no pip (on Debian: apt-get install python3-venv python3-pip)" >&2
  exit 2
fi

log="$venv/pip-install.log"
echo "venv.sh: installing $(grep -cE '^[A-Za-z0-9]' "$requirements") pinned packages into $venv" >&2
if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
  -r "$requirements" >"$log" 2>&1; then
  echo "pip could not install $requirements into $venv:" >&2
  tail -5 "$log" >&2
  exit 3
fi
echo "$wanted" >"$stamp"
