#!/usr/bin/env bash
# Build the local control plane's binaries from Go modules at pinned versions and cache them
# outside the repository: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (from
# k8s.io/kubernetes through a wrapper module), etcd (from go.etcd.io/etcd/server/v3, the version
# Kubernetes itself requires), kwok and kwokctl (sigs.k8s.io/kwok), helm (helm.sh/helm).
#
# Idempotent: a stamp file per version set means a second run does nothing.
# Usage: build-binaries.sh            -> prints the bin directory on stdout (last line)
set -euo pipefail

KUBE_VERSION="${DOCKYARD_KUBE_VERSION:-1.36.3}"
KWOK_VERSION="${DOCKYARD_KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${DOCKYARD_HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${DOCKYARD_CACHE:-$HOME/.cache/dockyard}"

STAGING_VERSION="0.${KUBE_VERSION#1.}"
KUBE_MINOR="$(cut -d. -f2 <<<"$KUBE_VERSION")"
KEY="k8s-v${KUBE_VERSION}-kwok-${KWOK_VERSION}-helm-${HELM_VERSION}"
BIN="$CACHE_ROOT/$KEY/bin"
# .complete-node: the set includes the real node's kubelet and kube-proxy (docs/real-node.md)
STAMP="$CACHE_ROOT/$KEY/.complete-node"

if [[ -f "$STAMP" ]]; then
  echo "$BIN"
  exit 0
fi

export GOTOOLCHAIN=local GOFLAGS=-modcacherw CGO_ENABLED=0
JOBS="${DOCKYARD_GO_JOBS:-$(nproc)}"
mkdir -p "$BIN" "$CACHE_ROOT/src"
log() { echo "[build-binaries] $*" >&2; }
gomod_of() { go mod download -json "$1" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])'; }

BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# --- Kubernetes components ------------------------------------------------------------------
if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kubectl" || ! -x "$BIN/kube-scheduler" || ! -x "$BIN/kube-controller-manager" \
      || ! -x "$BIN/kubelet" || ! -x "$BIN/kube-proxy" ]]; then
  SRC="$CACHE_ROOT/src/k8s-v$KUBE_VERSION"
  mkdir -p "$SRC"; cd "$SRC"; rm -f go.mod go.sum
  KGOMOD="$(gomod_of "k8s.io/kubernetes@v$KUBE_VERSION")"
  log "k8s.io/kubernetes v$KUBE_VERSION: $(grep -E '^go ' "$KGOMOD")"
  {
    echo 'module example.local/dockyard-k8sbins'; echo; echo 'go 1.26.0'; echo
    echo 'tool ('
    for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$c"; done
    echo ')'; echo; echo "require k8s.io/kubernetes v$KUBE_VERSION"; echo; echo 'replace ('
    # every staging module of the real go.mod, replaced by its published v0.X.Y
    sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$KGOMOD" | while read -r m; do
      printf '\t%s => %s v%s\n' "$m" "$m" "$STAGING_VERSION"
    done
    echo ')'
  } > go.mod
  log "resolving Kubernetes modules"
  go mod tidy >&2
  LDF=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDF+=" -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$KUBE_MINOR"
    LDF+=" -X $p.gitTreeState=clean -X $p.buildDate=$BUILD_DATE"
  done
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy (slow when cold)"
  go build -p "$JOBS" -trimpath -ldflags "-s -w$LDF" -o "$BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy >&2
fi

# --- etcd: the version Kubernetes requires -----------------------------------------------------
if [[ ! -x "$BIN/etcd" ]]; then
  KGOMOD="$(gomod_of "k8s.io/kubernetes@v$KUBE_VERSION")"
  ETCD_VERSION="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$KGOMOD")"
  SRC="$CACHE_ROOT/src/etcd-$ETCD_VERSION"
  mkdir -p "$SRC"; cd "$SRC"; rm -f go.mod go.sum
  printf 'module example.local/dockyard-etcdbin\n\ngo 1.26.0\n\ntool go.etcd.io/etcd/server/v3\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
  log "building etcd $ETCD_VERSION"
  go mod tidy >&2
  go build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3 >&2
fi

# --- kwok / kwokctl ------------------------------------------------------------------------------
if [[ ! -x "$BIN/kwok" || ! -x "$BIN/kwokctl" ]]; then
  log "building kwok and kwokctl $KWOK_VERSION"
  GOBIN="$BIN" go install -p "$JOBS" -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=v$KUBE_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" >&2
fi

# --- helm ---------------------------------------------------------------------------------------
if [[ ! -x "$BIN/helm" ]]; then
  log "building helm $HELM_VERSION"
  HELM_LDF="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    HELM_LDF+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$KUBE_MINOR"
  done
  GOBIN="$BIN" go install -p "$JOBS" -trimpath -ldflags "-s -w $HELM_LDF" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
fi

# kwok's stock stages ship in its module; copy them beside the binaries for the cluster setup.
KWOK_MOD="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION"
if [[ -d "$KWOK_MOD/kustomize/stage" ]]; then
  rm -rf "$CACHE_ROOT/$KEY/kwok-stages"; cp -r "$KWOK_MOD/kustomize/stage" "$CACHE_ROOT/$KEY/kwok-stages"
  chmod -R u+w "$CACHE_ROOT/$KEY/kwok-stages"
fi

"$BIN/kube-apiserver" --version >&2
"$BIN/etcd" --version | head -1 >&2
"$BIN/kwokctl" --version >&2
"$BIN/helm" version --short >&2
touch "$STAMP"
echo "$BIN"
