# Dockyard developer commands. The two a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)

.PHONY: run test venv binaries cluster cluster-down lint unit e2e crds crds-check bench clean

## run: start the local control plane and Dockyard (operator + facade on 127.0.0.1:8080)
run: venv
	$(PY) -m dockyard_localcluster run

## test: lint, type-check and the whole suite (unit + e2e on the local control plane)
test: venv lint
	$(PY) -m pytest

venv: $(INSTALLED)

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

## binaries: build the control-plane binaries from Go modules (cached in ~/.cache/dockyard)
binaries:
	bash operator/dockyard_localcluster/build-binaries.sh

## cluster / cluster-down: the local control plane alone (idempotent)
cluster: venv
	$(PY) -m dockyard_localcluster up

cluster-down: venv
	$(PY) -m dockyard_localcluster down

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

unit: venv
	$(PY) -m pytest tests/unit

e2e: venv
	$(PY) -m pytest tests/e2e

## crds: regenerate crds/ from the resource types, and the Helm chart's copy of them
crds: venv
	$(PY) -m dockyard_api.crdgen
	$(PY) -m dockyard_api.crdgen --output-dir charts/dockyard/crds

## bench: operator overhead vs plain Deployments, the 1,000-node scale run, chunked upload throughput,
## public deploy calls vs direct creates
bench: venv
	$(PY) -m bench.operator_overhead
	$(PY) -m bench.scale
	$(PY) -m bench.upload
	$(PY) -m bench.deploy_calls

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
