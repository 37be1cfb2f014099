#!/usr/bin/env bash
# Build the Gateway API Inference Extension's endpoint picker (cmd/epp) once per pinned version,
# outside the repo, from the Go module proxy:
#   ${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}/epp-<version>/epp
# Pure Go (CGO_ENABLED=0; v1.0.0 has no tokenizer cgo). Idempotent: skipped when the binary
# exists and its version stamp matches. Prints the binary's path on its last line.
# Measured cold here (module download and build, 2 cores): 162 s.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck disable=SC1091
source "$here/versions.env"
version="${GATEWAY_API_INFERENCE_EXTENSION_VERSION}"
cache="${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}"
dir="$cache/epp-${version}"
bin="$dir/epp"
if [[ -x "$bin" && -f "$dir/.version" && "$(cat "$dir/.version")" == "$version" ]]; then
  echo "$bin"; exit 0
fi
mkdir -p "$dir/module"
# A wrapper main module (like etcd's in build-binaries.sh): the extension's go.mod as required.
printf 'module llmservice.local/eppbin\n\ngo 1.26.0\n\nrequire sigs.k8s.io/gateway-api-inference-extension %s\n' \
  "$version" > "$dir/module/go.mod"
start=$SECONDS
(cd "$dir/module" && GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 \
  go build -trimpath -ldflags "-s -w" -o "$bin.tmp" sigs.k8s.io/gateway-api-inference-extension/cmd/epp)
mv -f "$bin.tmp" "$bin"
echo "$version" > "$dir/.version"
echo "[build-epp] epp ${version}: built in $((SECONDS - start))s" >&2
echo "$bin"
