#!/usr/bin/env bash
# Build the local control-plane binaries once per pinned version, outside the repo:
#   ${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}/bin-<K8S_VERSION>/
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, kwok, helm,
# lws-controller (LeaderWorkerSet) plus kwok stage files under stages/ and the LWS CRD under crds/.
# Idempotent: a binary is skipped when it exists and its .<name>.version stamp matches.
# The Kubernetes binaries, helm and kwok share one wrapper module (and so one module
# graph and one build cache), so the client-go/apimachinery packages compile once.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

CACHE="${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}"
BIN_DIR="${CACHE}/bin-${K8S_VERSION}"
WORK="${CACHE}/gowork-${K8S_VERSION}"
mkdir -p "${BIN_DIR}" "${WORK}"

export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

K8S_MINOR_FULL="${K8S_VERSION#v1.}"            # 37.2
K8S_MINOR="${K8S_MINOR_FULL%%.*}"              # 37
STAGING_VERSION="v0.${K8S_MINOR_FULL}"         # v0.37.2
GO_MIN="1.26.0"

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

stamp_ok() { # name version
  [[ -x "${BIN_DIR}/$1" && -f "${BIN_DIR}/.$1.version" && "$(cat "${BIN_DIR}/.$1.version")" == "$2" ]]
}

# build <module dir> <binary name> <version stamp> <package> [ldflags...]
build() {
  local mod="$1" name="$2" ver="$3" pkg="$4"; shift 4
  if stamp_ok "${name}" "${ver}"; then
    log "${name} ${ver}: up to date"
    return 0
  fi
  log "${name} ${ver}: building ${pkg}"
  local start=$SECONDS
  (cd "${mod}" && go build -trimpath -ldflags "-s -w $*" -o "${BIN_DIR}/${name}.tmp" "${pkg}")
  mv -f "${BIN_DIR}/${name}.tmp" "${BIN_DIR}/${name}"
  echo "${ver}" > "${BIN_DIR}/.${name}.version"
  log "${name} ${ver}: built in $((SECONDS - start))s"
}

# --- wrapper module for kubernetes + helm + kwok --------------------------------------
k8s_module() {
  local mod="${WORK}/k8s"
  local want="k8s=${K8S_VERSION} helm=${HELM_VERSION} kwok=${KWOK_VERSION}"
  if [[ -f "${mod}/.stamp" && "$(cat "${mod}/.stamp")" == "${want}" ]]; then
    echo "${mod}"; return 0
  fi
  log "preparing wrapper module ${mod} (${want})"
  rm -rf "${mod}"; mkdir -p "${mod}"
  local gomod
  gomod="$(cd "${mod}" && GOFLAGS= go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
  [[ -f "${gomod}" ]] || { log "could not download k8s.io/kubernetes@${K8S_VERSION}"; exit 1; }
  # Every staging module k8s.io/<name> => ./staging/src/k8s.io/<name> becomes v0.Y.Z.
  local staging
  staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "${gomod}")"
  [[ -n "${staging}" ]] || { log "no staging replace block found in ${gomod}"; exit 1; }
  {
    echo "module llmservice.local/k8sbins"
    echo
    echo "go ${GO_MIN}"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes ${K8S_VERSION}"
    echo "	helm.sh/helm/v3 ${HELM_VERSION}"
    echo "	sigs.k8s.io/kwok ${KWOK_VERSION}"
    echo ")"
    echo
    echo "replace ("
    for m in ${staging}; do echo "	${m} => ${m} ${STAGING_VERSION}"; done
    echo ")"
  } > "${mod}/go.mod"
  log "$(echo "${staging}" | wc -l) staging modules replaced with ${STAGING_VERSION}"
  echo "${want}" > "${mod}/.stamp"
  echo "${mod}"
}

etcd_module() {
  local mod="${WORK}/etcd"
  if [[ -f "${mod}/.stamp" && "$(cat "${mod}/.stamp")" == "${ETCD_VERSION}" ]]; then
    echo "${mod}"; return 0
  fi
  rm -rf "${mod}"; mkdir -p "${mod}"
  # A wrapper main module: etcd's own go.mod has local replaces (go install @v refuses it).
  printf 'module llmservice.local/etcdbin\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
    "${GO_MIN}" "${ETCD_VERSION}" > "${mod}/go.mod"
  echo "${ETCD_VERSION}" > "${mod}/.stamp"
  echo "${mod}"
}

TOTAL_START=$SECONDS
log "cache: ${BIN_DIR}"
log "versions: k8s ${K8S_VERSION} etcd ${ETCD_VERSION} kwok ${KWOK_VERSION} helm ${HELM_VERSION} lws ${LWS_VERSION}; $(go version)"

BUILD_DATE="1970-01-01T00:00:00Z"
KV="k8s.io/component-base/version"
CV="k8s.io/client-go/pkg/version"
K8S_LDFLAGS=""
for p in "${KV}" "${CV}"; do
  K8S_LDFLAGS+=" -X ${p}.gitVersion=${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${K8S_MINOR}"
  K8S_LDFLAGS+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${BUILD_DATE}"
  K8S_LDFLAGS+=" -X ${p}.gitCommit=0000000000000000000000000000000000000000"
done

need_k8s=0
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  stamp_ok "$b" "${K8S_VERSION}" || need_k8s=1
done
stamp_ok helm "${HELM_VERSION}" || need_k8s=1
stamp_ok kwok "${KWOK_VERSION}" || need_k8s=1
[[ -f "${BIN_DIR}/stages/.version" && "$(cat "${BIN_DIR}/stages/.version")" == "${KWOK_VERSION}" ]] \
  || need_k8s=1

if [[ ${need_k8s} == 1 ]]; then
  MOD="$(k8s_module)"
  # One `go build` for every binary of the wrapper module: it schedules their compiles and
  # links together on all cores (one binary at a time left a core idle during each link).
  # An -X flag for a package a binary does not link is ignored, so the flags are merged.
  K8S_PKGS=()
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    stamp_ok "$b" "${K8S_VERSION}" || K8S_PKGS+=("k8s.io/kubernetes/cmd/$b")
  done
  stamp_ok helm "${HELM_VERSION}" || K8S_PKGS+=(helm.sh/helm/v3/cmd/helm)
  stamp_ok kwok "${KWOK_VERSION}" || K8S_PKGS+=(sigs.k8s.io/kwok/cmd/kwok)
  if [[ ${#K8S_PKGS[@]} -gt 0 ]]; then
    log "building together: ${K8S_PKGS[*]##*/}"
    start=$SECONDS
    OUT="${BIN_DIR}/.build"
    rm -rf "${OUT}"; mkdir -p "${OUT}"
    (cd "${MOD}" && go build -trimpath -o "${OUT}/" -ldflags "-s -w ${K8S_LDFLAGS} \
      -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} \
      -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
      -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION} \
      -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION}" "${K8S_PKGS[@]}")
    for pkg in "${K8S_PKGS[@]}"; do
      name="${pkg##*/}"
      case "${name}" in
        helm) ver="${HELM_VERSION}" ;;
        kwok) ver="${KWOK_VERSION}" ;;
        *) ver="${K8S_VERSION}" ;;
      esac
      mv -f "${OUT}/${name}" "${BIN_DIR}/${name}"
      echo "${ver}" > "${BIN_DIR}/.${name}.version"
    done
    rmdir "${OUT}"
    log "${K8S_PKGS[*]##*/}: built in $((SECONDS - start))s"
  fi
  # kwok stage files (node and pod lifecycle) from the kwok module itself.
  KWOK_DIR="$(cd "${MOD}" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  rm -rf "${BIN_DIR}/stages"; mkdir -p "${BIN_DIR}/stages"
  # The set `kwokctl` uses by default: node-fast, node-heartbeat-with-lease, pod-fast.
  for d in node/fast node/heartbeat-with-lease pod/fast; do
    for f in "${KWOK_DIR}/kustomize/stage/${d}"/*.yaml; do
      [[ "$(basename "$f")" == kustomization.yaml ]] && continue
      cp "$f" "${BIN_DIR}/stages/$(basename "$f")"
    done
  done
  chmod u+w "${BIN_DIR}"/stages/*.yaml
  echo "${KWOK_VERSION}" > "${BIN_DIR}/stages/.version"
  log "kwok stages: $(cd "${BIN_DIR}/stages" && echo *.yaml)"
fi

build "$(etcd_module)" etcd "${ETCD_VERSION}" go.etcd.io/etcd/server/v3 \
  "-X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}"

# --- LeaderWorkerSet: its own module graph (k8s.io/* v0.33, controller-runtime) -----------
lws_module() {
  local mod="${WORK}/lws"
  if [[ -f "${mod}/.stamp" && "$(cat "${mod}/.stamp")" == "${LWS_VERSION}" ]]; then
    echo "${mod}"; return 0
  fi
  rm -rf "${mod}"; mkdir -p "${mod}"
  printf 'module llmservice.local/lwsbin\n\ngo %s\n\nrequire sigs.k8s.io/lws %s\n' \
    "${GO_MIN}" "${LWS_VERSION}" > "${mod}/go.mod"
  echo "${LWS_VERSION}" > "${mod}/.stamp"
  echo "${mod}"
}
LWS_MOD="$(lws_module)"
build "${LWS_MOD}" lws-controller "${LWS_VERSION}" sigs.k8s.io/lws/cmd \
  "-X sigs.k8s.io/lws/pkg/version.GitVersion=${LWS_VERSION}"
# Its CRD from the same module's files (config/crd/bases), stamped with the same version.
LWS_CRD="${BIN_DIR}/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
if [[ ! -f "${LWS_CRD}" || "$(cat "${BIN_DIR}/crds/.lws.version" 2>/dev/null)" != "${LWS_VERSION}" ]]; then
  LWS_DIR="$(cd "${LWS_MOD}" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)"
  mkdir -p "${BIN_DIR}/crds"
  install -m 0644 "${LWS_DIR}/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" "${LWS_CRD}"
  echo "${LWS_VERSION}" > "${BIN_DIR}/crds/.lws.version"
  log "LeaderWorkerSet CRD ${LWS_VERSION}: ${LWS_CRD}"
fi

log "all binaries ready in ${BIN_DIR} (total $((SECONDS - TOTAL_START))s)"
echo "${BIN_DIR}"
