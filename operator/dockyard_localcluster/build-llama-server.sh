#!/usr/bin/env bash
# Build llama.cpp's own OpenAI-compatible server, `llama-server`, once and cache it outside the
# repository: the binary of Dockyard's llama.cpp engine image (the operator starts it with
# llama-server's flags, runtimes.llama_cpp_args). Upstream's image is not reachable from here, so the
# same server is compiled from the llama.cpp that llama-cpp-python's PyPI source distribution vendors
# (vendor/llama.cpp, tools/server), for the CPU, as ONE static binary: ggml and llama linked in
# (BUILD_SHARED_LIBS=OFF), no libcurl/OpenSSL (the engine reads a mounted GGUF file, it never
# downloads), so at run time it needs only glibc, libstdc++, libgcc_s and libgomp (OpenMP threads).
#
# Instruction set: GGML_NATIVE=OFF (never the build machine's own CPU) with the x86-64-v3 extensions
# (AVX, AVX2, FMA, F16C, BMI2, SSE4.2; every x86-64 server CPU since 2013/2015) switched on explicitly,
# since without them ggml would be compiled for bare SSE2 and run several times slower.
# DOCKYARD_LLAMA_SERVER_CMAKE_ARGS adds or overrides cmake options (e.g. "-DGGML_AVX2=OFF ...").
#
# Web UI: llama-server embeds a web UI (tools/ui) that the source distribution does not ship (neither
# its sources' build output tools/ui/dist nor npm), and at build time cmake would try to download it
# from Hugging Face. The UI is not part of Dockyard (clients use the OpenAI API through the gateway),
# so nothing stands in for it: LLAMA_BUILD_UI=OFF and LLAMA_USE_PREBUILT_UI=OFF make
# scripts/ui-assets.cmake take its documented disconnected path and embed an empty asset table
# (no network, no patched sources); `/` then answers 404 and the API routes are unaffected.
#
# Idempotent: an existing binary of the pinned version means nothing is built. One build at a time
# per cache (flock). Cache: ${DOCKYARD_CACHE:-~/.cache/dockyard}/llama-server/<version>/bin/llama-server,
# the source distribution under .../llama-server/sdist/.
# Usage: build-llama-server.sh      -> prints the directory holding llama-server on stdout (last line);
#                                      progress goes to stderr
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${DOCKYARD_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE_ROOT="${DOCKYARD_CACHE:-$HOME/.cache/dockyard}"
ROOT="$CACHE_ROOT/llama-server"
SDISTS="$ROOT/sdist"
BIN="$ROOT/$LLAMA_CPP_PYTHON_VERSION/bin"
PYTHON="${PYTHON:-python3.11}"
log() { echo "[build-llama-server] $*" >&2; }

mkdir -p "$SDISTS"
exec 9>"$CACHE_ROOT/.build-llama-server.lock"
flock 9
if [[ -x "$BIN/llama-server" ]]; then
  echo "$BIN"
  exit 0
fi

for tool in gcc g++ cmake tar; do
  if ! command -v "$tool" >/dev/null; then
    log "$tool is required to build llama.cpp (apt-get install build-essential cmake)"
    exit 1
  fi
done

SDIST="$SDISTS/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
if [[ ! -s "$SDIST" ]]; then
  log "downloading llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's source distribution from PyPI"
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --dest "$SDISTS" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
  [[ -s "$SDIST" ]] || { log "pip download did not produce $SDIST"; exit 1; }
fi

WORK="$(mktemp -d "$ROOT/.build-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
log "building llama-server from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's vendored llama.cpp (CPU; slow when cold)"
tar -xzf "$SDIST" -C "$WORK" "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
SRC="$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"

# LLAMA_CURL is deprecated (ignored) in this llama.cpp; LLAMA_OPENSSL=OFF keeps libssl out.
# shellcheck disable=SC2086  # DOCKYARD_LLAMA_SERVER_CMAKE_ARGS is a list of words on purpose
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DGGML_OPENMP=ON \
  ${DOCKYARD_LLAMA_SERVER_CMAKE_ARGS:-} >&2
# only the server and what it links; one compiler per core
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  cmake --build "$WORK/build" --config Release --target llama-server >&2

mkdir -p "$BIN"
install -m 0755 "$WORK/build/bin/llama-server" "$BIN/llama-server.tmp"
strip "$BIN/llama-server.tmp" 2>/dev/null || true
mv "$BIN/llama-server.tmp" "$BIN/llama-server"
log "built in $(( $(date +%s) - start ))s: $BIN/llama-server ($(du -h "$BIN/llama-server" | cut -f1)); shared libraries:"
ldd "$BIN/llama-server" >&2 || true
echo "$BIN"
