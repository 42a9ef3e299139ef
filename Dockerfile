# One image for both entry points: the Deployment runs `raftset-operator`, the operator
# renders pods whose sidecar container runs `raftset-sidecar` from the same image.
# etcdutl for the sidecar's restore of an EtcdCluster's spec.bootstrap.fromBackup (docs/backups.md):
# the default etcd release's, as the store image ships it.
FROM gcr.io/etcd-development/etcd:v3.7.3 AS etcd

# xlineutl for the same restore of an XlineCluster; the Xline image does not ship it. Built from
# the commit and toolchain the tests build (tools/devcluster/versions.py).
FROM rust:1.74.0-bookworm AS xline
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libclang-dev clang \
 && rm -rf /var/lib/apt/lists/*
RUN git clone --recursive https://github.com/xline-kv/Xline /xline \
 && git -C /xline checkout 71479a4f \
 && git -C /xline submodule update --init --recursive \
 && cd /xline && cargo build --release --locked --bin xlineutl

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/raftset
WORKDIR /src
COPY pyproject.toml README.md ./
COPY raftset/ raftset/
COPY operator/ operator/
COPY sidecar/ sidecar/
COPY plugin/ plugin/
RUN /opt/raftset/bin/pip install .

FROM python:3.11-slim
ENV PATH=/opt/raftset/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/raftset /opt/raftset
COPY --from=etcd /usr/local/bin/etcdutl /usr/local/bin/etcdutl
COPY --from=xline /xline/target/release/xlineutl /usr/local/bin/xlineutl
# A fixed numeric uid so that runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --gid 65532 raftset \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin raftset
USER 65532:65532
WORKDIR /tmp
CMD ["raftset-operator"]
