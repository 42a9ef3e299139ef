# One image for both entry points: the Deployment runs `raftset-operator`, the operator
# renders pods whose sidecar container runs `raftset-sidecar` from the same image.
#
# The bases are build arguments: the upstream images by default; the real-node lab builds this
# same file from local bases where no registry is reachable (tools/devcluster/projectimage.py).
# PYTHON_BASE: a Debian bookworm with Python 3.11 as `python`, venv included.
ARG PYTHON_BASE=python:3.11-slim
# ETCD_BASE: any image with /usr/local/bin/etcdutl.
ARG ETCD_BASE=gcr.io/etcd-development/etcd:v3.7.3
# XLINEUTL_FROM: the stage below that builds xlineutl, or any image with /usr/local/bin/xlineutl.
ARG XLINEUTL_FROM=xline-build

# etcdutl for the sidecar's restore of an EtcdCluster's spec.bootstrap.fromBackup (docs/backups.md):
# the default etcd release's, as the store image ships it.
FROM ${ETCD_BASE} AS etcd

# xlineutl for the same restore of an XlineCluster; the Xline image does not ship it. Built from
# the commit and toolchain the tests build (tools/devcluster/versions.py).
FROM rust:1.74.0-bookworm AS xline-build
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libclang-dev clang \
 && rm -rf /var/lib/apt/lists/*
RUN git clone --recursive https://github.com/xline-kv/Xline /xline \
 && git -C /xline checkout 71479a4f \
 && git -C /xline submodule update --init --recursive \
 && cd /xline && cargo build --release --locked --bin xlineutl \
 && install -m 0755 target/release/xlineutl /usr/local/bin/xlineutl
FROM ${XLINEUTL_FROM} AS xline

FROM ${PYTHON_BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/raftset
WORKDIR /src
COPY pyproject.toml README.md ./
COPY raftset/ raftset/
COPY operator/ operator/
COPY sidecar/ sidecar/
COPY plugin/ plugin/
RUN /opt/raftset/bin/pip install .

FROM ${PYTHON_BASE}
ENV PATH=/opt/raftset/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/raftset /opt/raftset
COPY --from=etcd /usr/local/bin/etcdutl /usr/local/bin/etcdutl
COPY --from=xline /usr/local/bin/xlineutl /usr/local/bin/xlineutl
# A fixed numeric uid so that runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --gid 65532 raftset \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin raftset
USER 65532:65532
WORKDIR /tmp
CMD ["raftset-operator"]
