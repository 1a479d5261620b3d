#!/usr/bin/env bash
# Build trinity-core and every plugin under plugins/ (or the project folders given) into a wheelhouse,
# so that plugins install by name. Run with --help for the usage.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<EOF
usage: scripts/build_wheels.sh [-h] [PROJECT_DIR ...]

Build wheels of trinity-core and every plugin under plugins/ (or only the PROJECT_DIRs given) into a
wheelhouse, so that plugins install by name:

  scripts/build_wheels.sh                       # dist/: the core and every shipped plugin
  pip install --find-links dist trinity-plugin-sapo

Wheels are built with "python -m pip wheel --no-deps --no-build-isolation": no network, the build
backend (setuptools) of the interpreter is used. The interpreter is the first of: \$PYTHON, the active
virtual environment (\$VIRTUAL_ENV), the checkout's .venv, python3, python on PATH, that has pip and a
setuptools that builds wheels (setuptools >= 70.1, or an older one with the wheel package).

environment:
  PYTHON       the interpreter to build with (it must have pip and setuptools >= 70.1)
  WHEELHOUSE   where the wheels go (default: dist/ of the checkout)

options:
  -h, --help   show this help and exit
EOF
}

for arg in "$@"; do
    case "$arg" in
        -h | --help)
            usage
            exit 0
            ;;
        -*)
            echo "build_wheels.sh: error: unknown option $arg" >&2
            usage >&2
            exit 2
            ;;
    esac
done

# Exits 0 when the interpreter can build wheels without build isolation; else prints what is missing.
# setuptools first: looking pip up before it makes setuptools' distutils shim give way to the stdlib's.
probe='
import importlib.util, sys
missing = []
try:
    from setuptools.dist import Distribution
except ImportError:
    missing.append("setuptools")
else:
    try:
        Distribution().get_command_class("bdist_wheel")
    except Exception:
        missing.append("bdist_wheel (setuptools>=70.1, or the wheel package)")
if importlib.util.find_spec("pip") is None:
    missing.append("pip")
if missing:
    print(", ".join(missing))
    sys.exit(1)
'

has_build_tools() {
    "$1" -c "$probe" 2>/dev/null
}

pick_python() {
    if [ -n "${PYTHON:-}" ]; then
        local missing
        if ! missing="$(has_build_tools "$PYTHON")"; then
            echo "build_wheels.sh: error: PYTHON=$PYTHON cannot build wheels: missing ${missing:-a working interpreter}; install them into it (\"$PYTHON\" -m pip install 'setuptools>=70.1' pip) or point PYTHON at another interpreter" >&2
            return 1
        fi
        echo "$PYTHON"
        return 0
    fi
    local candidates=()
    [ -n "${VIRTUAL_ENV:-}" ] && candidates+=("$VIRTUAL_ENV/bin/python")
    candidates+=("$root/.venv/bin/python" python3 python)
    local tried=()
    for candidate in "${candidates[@]}"; do
        if command -v "$candidate" >/dev/null 2>&1; then
            if has_build_tools "$candidate" >/dev/null; then
                echo "$candidate"
                return 0
            fi
            tried+=("$candidate")
        fi
    done
    echo "build_wheels.sh: error: no interpreter with pip and setuptools>=70.1 (tried: ${tried[*]:-none found}); install them (python3 -m pip install 'setuptools>=70.1' pip), or set PYTHON=/path/to/python" >&2
    return 1
}

python="$(pick_python)"
out="${WHEELHOUSE:-$root/dist}"
if [ "$#" -eq 0 ]; then
    set -- "$root" "$root"/plugins/*/
fi
for project in "$@"; do
    if [ ! -f "$project/pyproject.toml" ]; then
        echo "build_wheels.sh: error: $project is not a project folder (no pyproject.toml there); give the folders of trinity-core or of plugins (plugins/trinity-plugin-NAME)" >&2
        exit 2
    fi
done
mkdir -p "$out"
echo "building $# wheel(s) with $python into $out" >&2
for project in "$@"; do
    "$python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$out" "$project"
done
ls "$out"
