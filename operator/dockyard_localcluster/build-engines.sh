#!/usr/bin/env bash
# Build the local model engines once and cache them outside the repository: llama.cpp's
# OpenAI-compatible server from llama-cpp-python's PyPI source distribution, compiled (CPU only) with
# the machine's gcc and cmake into a wheel under ~/.cache/dockyard/wheels. `make venv` installs the
# wheel from there (pip --find-links), so the compile happens once per machine and version.
#
# Idempotent: an existing wheel of the pinned version means nothing is built.
# Usage: build-engines.sh            -> prints the wheel directory on stdout (last line)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${DOCKYARD_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE_ROOT="${DOCKYARD_CACHE:-$HOME/.cache/dockyard}"
WHEELS="$CACHE_ROOT/wheels"
PYTHON="${PYTHON:-python3.11}"
log() { echo "[build-engines] $*" >&2; }

mkdir -p "$WHEELS"
# one build at a time per cache (two checkouts running `make venv` at once wait for each other)
exec 9>"$CACHE_ROOT/.build-engines.lock"
flock 9
if compgen -G "$WHEELS/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}-*.whl" >/dev/null; then
  echo "$WHEELS"
  exit 0
fi

for tool in gcc g++ cmake; do
  if ! command -v "$tool" >/dev/null; then
    log "$tool is required to build llama.cpp (apt-get install build-essential cmake)"
    exit 1
  fi
done

WORK="$(mktemp -d "$CACHE_ROOT/.engines-build-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
log "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from its source distribution (CPU; slow when cold)"
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check pip==25.3
# The multimodal library (LLAVA_BUILD) is left out: Dockyard serves text models, and llama-cpp-python
# loads it only for multimodal chat handlers. CMAKE_BUILD_PARALLEL_LEVEL: one compiler per core.
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$WORK/venv/bin/pip" wheel --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
  --wheel-dir "$WORK/wheels" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
mv "$WORK"/wheels/llama_cpp_python-*.whl "$WHEELS/"
log "built in $(( $(date +%s) - start ))s: $(ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl)"
echo "$WHEELS"
