#!/usr/bin/env bash
# Usage: tests/python/venv.sh <venv-dir> <requirements-file>
#
# Makes (or reuses) a Python virtual environment at <venv-dir> holding the pinned packages of
# <requirements-file> (one of tests/python/requirements-*.txt). The tests and .ci/run call it so a fresh
# machine installs its own Python tools; nothing is installed outside <venv-dir>.
#
# A copy of the requirements file is kept in the venv once they are installed: the next call with the
# same file returns at once, a changed file installs again. Exits non-zero (saying why on stderr) when
# python3, its venv module or pip cannot provide them; callers decide whether that skips or fails.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <venv-dir> <requirements-file>" >&2
  exit 2
fi
venv=$1
requirements=$2

if [ ! -f "$requirements" ]; then
  echo "no requirements file at $requirements" >&2
  exit 2
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "python3 is not installed" >&2
  exit 3
fi

stamp="$venv/.requirements-$(basename "$requirements")"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2 || {
    echo "python3 -m venv $venv failed (on Debian: apt-get install python3-venv)" >&2
    exit 3
  }
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2 || {
  echo "pip could not install $requirements into $venv (is PyPI reachable?)" >&2
  exit 3
}
cp "$requirements" "$stamp"
