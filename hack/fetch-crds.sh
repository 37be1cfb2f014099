#!/usr/bin/env bash
# Copies third-party CRDs (KEDA ScaledObject, Gateway API HTTPRoute, the Prometheus Operator's
# PrometheusRule, the Inference Extension's InferencePool and InferenceObjective) from their Go
# modules, as pinned in hack/versions.env, into the cache (never into the repo). Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck disable=SC1091
source "$here/versions.env"
cache="${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}"
out="$cache/crds-keda-${KEDA_VERSION}-gateway-${GATEWAY_API_VERSION}-promop-${PROMETHEUS_OPERATOR_VERSION}-gie-${GATEWAY_API_INFERENCE_EXTENSION_VERSION}"
if [[ -f "$out/.done" ]]; then echo "$out"; exit 0; fi
mkdir -p "$out"
keda_dir="$(GOFLAGS=-mod=mod go mod download -json "github.com/kedacore/keda/v2@${KEDA_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
gw_dir="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@${GATEWAY_API_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
install -m 0644 "$keda_dir/config/crd/bases/keda.sh_scaledobjects.yaml" "$out/"
install -m 0644 "$gw_dir/config/crd/standard/gateway.networking.k8s.io_httproutes.yaml" "$out/"
install -m 0644 "$gw_dir/config/crd/standard/gateway.networking.k8s.io_gateways.yaml" "$out/"
promop_dir="$(GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
install -m 0644 "$promop_dir/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" "$out/"
gie_dir="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api-inference-extension@${GATEWAY_API_INFERENCE_EXTENSION_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
install -m 0644 "$gie_dir/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$out/"
install -m 0644 "$gie_dir/config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml" "$out/"
touch "$out/.done"
echo "$out"
