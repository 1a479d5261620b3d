#!/usr/bin/env bash
# The full test suite on a fresh machine: a small venv with tox, the reference implementation the
# comparison tests read (trinity-rft 0.6.0, unpacked into .ref/ with no dependencies), then the tox matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
# Machines of this project keep a CPU build of torch on local disk; let uv find it there.
if [ -d /opt/wheels ] && [ -z "${UV_FIND_LINKS:-}" ]; then export UV_FIND_LINKS=/opt/wheels; fi
python3 -m venv .venv-tox
.venv-tox/bin/pip install -q -c constraints.txt 'tox>=4.20' 'tox-uv>=1.11'
[ -f .ref/trinity/__init__.py ] || .venv-tox/bin/pip install -q --no-deps --target .ref trinity-rft==0.6.0 omegaconf
# --recreate: plugins are installed as built packages and the core's entry points live in its install
# metadata, neither of which tox sees change; with uv's cache a fresh env costs seconds.
.venv-tox/bin/tox run-parallel --recreate --parallel 2 --parallel-live "$@"
