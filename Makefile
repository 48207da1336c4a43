# Dockyard developer commands. The two a newcomer needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# the venv is (re)installed when pyproject.toml or the C extension's source changes (its build lives in the tree)
INSTALLED := $(VENV)/.installed-$(shell cat pyproject.toml api/dockyard_core/_spans.c api/dockyard_core/_pump.c | sha256sum | cut -c1-16)
WHEELS := $(or $(DOCKYARD_CACHE),$(HOME)/.cache/dockyard)/wheels
# pytest-xdist workers of `make test`, each with a local control plane of its own (tests/conftest.py); the
# suite mostly waits on servers, so three keep two cores busy
TEST_WORKERS ?= 3

.PHONY: run run-incluster test test-incluster venv engines binaries minio prometheus jaeger alert-rules cluster cluster-down testbed testbed-down lint static-checks unit e2e chaos test-unit test-tools test-e2e test-browser test-chaos crds bench clean cli-docs

## run: start the local control plane and Dockyard (operator + facade on 127.0.0.1:8080). LLAMA_SERVER=1: the
## local engine runner serves GGUF pods with llama.cpp's own llama-server (compiled once by build-llama-server.sh,
## cached), which exports the load gauges the autoscaler reads (docs/runtimes.md), instead of llama-cpp-python's
run: venv
	$(if $(LLAMA_SERVER),DOCKYARD_LOCAL_ENGINES_LLAMA_SERVER="$$(bash operator/dockyard_localcluster/build-llama-server.sh | tail -1)/llama-server") \
	$(PY) -m dockyard_localcluster run

## run-incluster: the same, with Dockyard installed from its chart into the real-node test bed (its own
## images, pods on a real kubelet node; docs/real-node.md); the facade relayed to 127.0.0.1:8080
run-incluster: venv
	$(PY) -m dockyard_localcluster run --in-cluster

## test: the whole suite on $(TEST_WORKERS) pytest-xdist workers: the static checks (make static-checks), unit,
## tools, e2e, browser and chaos on local control planes, and the in-cluster part (Dockyard installed from its
## chart on the real-node test bed); then the 20 slowest tests
test: venv minio
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=20

## test-incluster: the in-cluster part alone (marker incluster: tests/incluster)
test-incluster: venv
	$(PY) -m pytest --durations=20 tests/incluster

venv: $(INSTALLED)

$(INSTALLED): pyproject.toml api/dockyard_core/_spans.c api/dockyard_core/_pump.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	bash operator/dockyard_localcluster/build-engines.sh >/dev/null
	$(PY) -m pip install --quiet --disable-pip-version-check --find-links $(WHEELS) -e '.[dev,engines]'
	rm -f $(VENV)/.installed-* && touch $@

## engines: build llama.cpp's server (llama-cpp-python, CPU) once into ~/.cache/dockyard/wheels
engines:
	bash operator/dockyard_localcluster/build-engines.sh

## binaries: build the control-plane binaries from Go modules (cached in ~/.cache/dockyard)
binaries:
	bash operator/dockyard_localcluster/build-binaries.sh

## images: every image the chart and the in-cluster tests use, built with podman from a Debian base, no
## registry (cached by content key in ~/.cache/dockyard; docs/real-node.md)
.PHONY: images
images: venv
	$(PY) -m dockyard_localcluster images

## minio: build MinIO from its Go module (cached in ~/.cache/dockyard) for the S3 model-store tests
minio:
	bash operator/dockyard_localcluster/build-minio.sh

## prometheus: build prometheus and promtool from their Go module (cached in ~/.cache/dockyard) for the alert-rule
## tests (the first build takes minutes: docs/observability.md)
prometheus: venv
	$(PY) -c "from tests.support.prometheus import binaries; print(binaries())"

## jaeger: build Jaeger v2 from its Go module (cached in ~/.cache/dockyard) for the trace tests (the first build
## takes minutes: docs/observability.md)
jaeger: venv
	$(PY) -c "from tests.support.jaeger import jaeger_binary; print(jaeger_binary())"

## alert-rules: regenerate charts/dockyard/files/alerts.yaml from api/dockyard_core/alertrules.py
alert-rules: venv
	$(PY) -m dockyard_core.alertrules --output charts/dockyard/files/alerts.yaml

## cluster / cluster-down: the local control plane alone (idempotent)
cluster: venv
	$(PY) -m dockyard_localcluster up

cluster-down: venv
	$(PY) -m dockyard_localcluster down

## testbed / testbed-down: the real-node test bed alone (a real kubelet node beside kwok's GPU pools, in the
## network namespace dockyard-tb; idempotent), and its removal (host state restored; docs/real-node.md)
testbed: venv
	$(PY) -m dockyard_localcluster testbed up

testbed-down: venv
	$(PY) -m dockyard_localcluster testbed down

## lint: ruff, ruff format --check, mypy (strict), import-linter's layer contracts. static-checks: the same
## without installing first (`make test` runs them as a test, tests/tools/test_static_checks.py)
lint: venv
	@$(MAKE) --no-print-directory static-checks

static-checks:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## test-unit / test-tools / test-e2e / test-browser / test-chaos: one suite alone, by its marker (tests/conftest.py
## marks each directory of tests/): unit (no cluster, no tool but Python), tools (helm, hadolint, MinIO,
## PostgreSQL), e2e and browser (the local control plane), chaos (the control plane restarted under load, the
## operator SIGKILLed; docs/reliability.md). `make test` runs them all; unit, e2e and chaos are aliases.
test-unit: venv
	$(PY) -m pytest -m unit

test-tools: venv minio
	$(PY) -m pytest -m tools

test-e2e: venv
	$(PY) -m pytest -m e2e

test-browser: venv
	$(PY) -m pytest -m browser

test-chaos: venv
	$(PY) -m pytest -m chaos

unit: test-unit
e2e: test-e2e
chaos: test-chaos

## crds: regenerate crds/ from the resource types, and the Helm chart's copy of them
crds: venv
	$(PY) -m dockyard_core.crdgen
	$(PY) -m dockyard_core.crdgen --output-dir charts/dockyard/crds

## cli-docs: docs/cli.md from the dockyard command's --help
cli-docs: venv
	$(PY) -m dockyard_client.cli.docs docs/cli.md

## bench: operator overhead vs plain Deployments, the 1,000-node scale run, chunked upload throughput,
## public deploy calls vs direct creates, the CTranslate2 server vs generate_batch
bench: venv
	$(PY) -m bench.operator_overhead
	$(PY) -m bench.scale
	$(PY) -m bench.upload
	$(PY) -m bench.deploy_calls
	$(PY) -m bench.ct2_server
	$(PY) -m bench.metrics_parser

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
