#!/usr/bin/env bash
# Build trinity-core and every plugin under plugins/ (or the project folders given) into a wheelhouse,
# so that plugins install by name:
#   scripts/build_wheels.sh                      # dist/: the core and every shipped plugin
#   pip install --find-links dist trinity-plugin-sapo
# WHEELHOUSE overrides the folder; PYTHON the interpreter (it needs pip and setuptools; no network: the
# wheels are built without build isolation and without dependencies).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${WHEELHOUSE:-$root/dist}"
python="${PYTHON:-python}"
if [ "$#" -eq 0 ]; then
    set -- "$root" "$root"/plugins/*/
fi
mkdir -p "$out"
for project in "$@"; do
    "$python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$out" "$project"
done
ls "$out"
