#!/usr/bin/env bash
# Build MinIO (a real S3-compatible server) from its Go module at a pinned version and cache it
# outside the repository, like the control-plane binaries: the model store's S3 backend is tested
# against it on 127.0.0.1 (tests/support/minio.py). MinIO publishes no semver tags, so the version is
# the Go module proxy's pseudo-version of a commit on its master branch.
#
# Idempotent: a stamp file per version means a second run does nothing.
# Usage: build-minio.sh            -> prints the minio binary's path on stdout (last line)
set -euo pipefail

MINIO_VERSION="${DOCKYARD_MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
CACHE_ROOT="${DOCKYARD_CACHE:-$HOME/.cache/dockyard}"
BIN="$CACHE_ROOT/minio-$MINIO_VERSION/bin"
STAMP="$CACHE_ROOT/minio-$MINIO_VERSION/.complete"

if [[ -f "$STAMP" && -x "$BIN/minio" ]]; then
  echo "$BIN/minio"
  exit 0
fi

export GOTOOLCHAIN=local GOFLAGS=-modcacherw CGO_ENABLED=0
JOBS="${DOCKYARD_GO_JOBS:-$(nproc)}"
mkdir -p "$BIN"
echo "[build-minio] building github.com/minio/minio@$MINIO_VERSION with $(go version | cut -d' ' -f3) (slow when cold)" >&2
GOBIN="$BIN" go install -p "$JOBS" -trimpath -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION" >&2
"$BIN/minio" --version >&2 || true
touch "$STAMP"
echo "$BIN/minio"
