# raftset: two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OVERLAY ?= kruise
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: help deps venv system-deps controlplane test unit run bench clean

help:
	@echo "make run    - local control plane + operator + a sample cluster (or use \$$KUBECONFIG)"
	@echo "make test   - every test tier: unit, etcd, k8s, e2e"
	@echo "make bench  - benchmarks, results in docs/benchmarks.md"

deps: venv system-deps

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# Debian's etcd 3.4 server and client: the real members of the etcd tier.
system-deps:
	@command -v etcd >/dev/null && command -v etcdctl >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client; }

# kube-apiserver, controller-manager, scheduler, OpenKruise and kwok, built once into a cache.
controlplane: venv
	$(PY) -m tools.devcluster build

unit: venv
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

test: deps controlplane
	$(PY) -m pytest -m "unit or etcd or k8s or e2e" $(PYTEST_ARGS)

run: deps controlplane
	$(PY) -m tools.devcluster run --overlay $(OVERLAY)

bench: deps controlplane
	$(PY) -m tests.bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
