# raftset: two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OVERLAY ?=
NODES ?= kwok
PYTEST_ARGS ?=
WORKERS ?= 3
BENCH_ARGS ?=

.PHONY: help deps venv system-deps realnode-deps controlplane test unit run bench robustness generate clean

help:
	@echo "make run    - local control plane + operator + a sample cluster (or use \$$KUBECONFIG); NODES=real: on real nodes"
	@echo "make test   - every test tier: unit, etcd, k8s, e2e, real"
	@echo "make bench  - benchmarks, results in docs/benchmarks.md"
	@echo "make robustness - the whole robustness campaign, its table in docs/robustness.md"

deps: venv system-deps realnode-deps

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# What building Xline needs: protoc, libclang (RocksDB's bindgen) and its pinned Rust toolchain;
# libfaketime for the fault catalog's skewed clocks (tests/harness/faults.py).
system-deps:
	@command -v protoc >/dev/null && command -v clang >/dev/null && ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 \
	  && ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler libclang-dev clang libfaketime; }
	@rustup toolchain list | grep -q '^1\.74\.0-' || rustup toolchain install 1.74.0 --profile minimal

# The real-node lab's runtime (docs/devcluster.md, "Real nodes"): Debian's containerd 1.6, runc 1.1
# and CNI plugins 1.1, socat for the apiserver's bridge out of the lab, iptables for kube-proxy,
# mmdebstrap and buildah for the images (the `real` tier). On a host with systemd, apt starts a
# system containerd too; the lab never uses it (each node runs its own).
realnode-deps:
	@command -v containerd >/dev/null && command -v runc >/dev/null && test -x /usr/lib/cni/bridge \
	  && command -v socat >/dev/null && command -v iptables >/dev/null \
	  && command -v mmdebstrap >/dev/null && command -v buildah >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    containerd runc containernetworking-plugins socat iptables mmdebstrap buildah; }

# etcd 3.5/3.6/3.7, kube-apiserver, controller-manager, scheduler, OpenKruise, kwok and Xline,
# cert-manager's controller (and versitygw, Toxiproxy, promtool, Helm), built once into a cache (Xline from $$RAFTSET_XLINE_SOURCE and
# cert-manager from $$RAFTSET_CERT_MANAGER_SOURCE, else a clone of the pinned commit/tag).
controlplane: venv
	$(PY) -m tools.devcluster build

unit: venv
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

# Three workers, each taking the longest queued work unit (the unit or the real tier, or a test file) when it is
# free (tests/harness/work_units.py); the tests mostly wait, so a third worker on two cores pays. A fourth
# did not: rehearsal ci34 (2026-11-29) ran at load average 15-19 and failed tests that pass with three.
# The slowest tests are listed at the end: where the warm run's wall time goes.
test: deps controlplane
	$(PY) -m pytest -m "unit or etcd or k8s or e2e or real" -n $(WORKERS) --durations=120 $(PYTEST_ARGS)

# The whole campaign (tests/harness/campaign.py): two cases at a time, the etcd cases and the Xline
# cases each in a pytest of their own with its own control plane (about two hours on 2 cores, a
# case about a minute); each case's result is saved, and the table in docs/robustness.md is written
# from what ran. Each engine's output is in $(CAMPAIGN_RESULTS)/<engine>.log. CAMPAIGN_K narrows the
# cases with pytest's -k (e.g. CAMPAIGN_K="and scale-in").
CAMPAIGN_RESULTS ?= .robustness
CAMPAIGN_K ?=
robustness: deps controlplane
	rm -rf $(CAMPAIGN_RESULTS) && mkdir -p $(CAMPAIGN_RESULTS)
	status=0; pids=""; \
	for engine in etcd xline; do \
	  RAFTSET_CAMPAIGN=all RAFTSET_CAMPAIGN_RESULTS=$(CAMPAIGN_RESULTS) $(PY) -m pytest tests/e2e/test_campaign.py \
	    -m e2e -n 0 -p no:randomly -p no:cacheprovider -k "$$engine $(CAMPAIGN_K)" $(PYTEST_ARGS) \
	    > $(CAMPAIGN_RESULTS)/$$engine.log 2>&1 & pids="$$pids $$!"; \
	done; \
	for pid in $$pids; do wait $$pid || status=1; done; \
	tail -n 3 $(CAMPAIGN_RESULTS)/etcd.log $(CAMPAIGN_RESULTS)/xline.log; \
	$(PY) -m tests.harness.campaign $(CAMPAIGN_RESULTS) docs/robustness.md && exit $$status

run: deps
	$(PY) -m tools.devcluster run --nodes $(NODES) $(if $(OVERLAY),--overlay $(OVERLAY))

# The benchmarks call etcd and etcdctl by name: the default etcd's build comes first on PATH.
bench: deps controlplane
	PATH="$$($(PY) -c 'from tools.devcluster import build; print(build.ETCD.out_dir)'):$$PATH" $(PY) -m tests.bench $(BENCH_ARGS)

# The CRDs and the reference doc from tools/crdgen.py, then the Helm chart's copies of the CRDs and
# of kustomize/ (tools/chartgen.py). A unit test fails while any of them is stale.
generate: venv
	$(PY) -m tools.crdgen

clean:
	rm -rf $(VENV) build *.egg-info
