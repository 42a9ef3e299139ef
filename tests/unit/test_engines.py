"""The one engine description: images, commands, the startup file each store reads, owned flags."""

from __future__ import annotations

import shlex

import pytest
import yaml

from raftset import contract
from raftset.engines import BY_KIND, ENGINES, ETCD, XLINE, Engine, StartupConfig, TLSFiles

pytestmark = pytest.mark.unit

PEERS = {
    "demo-1": "http://demo-1.demo-peer.db.svc:2380",
    "demo-0": "http://demo-0.demo-peer.db.svc:2380",
}


def config(**overrides: object) -> StartupConfig:
    fields: dict[str, object] = {
        "name": "demo-1",
        "data_dir": contract.DATA_DIR,
        "peer_url": "http://demo-1.demo-peer.db.svc:2380",
        "client_url": "http://demo-1.demo-peer.db.svc:2379",
        "listen_peer_url": "http://0.0.0.0:2380",
        "listen_client_url": "http://0.0.0.0:2379",
        "initial_cluster": PEERS,
        "state": "existing",
        "cluster_token": "db/demo/0b1c2d3e",
    }
    fields.update(overrides)
    return StartupConfig(**fields)  # type: ignore[arg-type]


def etcd_doc(cfg: StartupConfig) -> dict:
    return yaml.safe_load(ETCD.render_startup(cfg))


def xline_argv(cfg: StartupConfig) -> list[str]:
    text = XLINE.render_startup(cfg)
    assert text.endswith("\n") and text.count("\n") == 1
    # The pod's shell runs `eval "exec xline $(cat file)"`: shell-word splitting is the parser.
    return shlex.split(text)


def flag_values(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        assert argv[i].startswith("--"), argv[i]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            out[argv[i][2:]] = None
            i += 1
    return out


# --- registry --------------------------------------------------------------------------------

def test_engine_registry() -> None:
    assert ENGINES == {"etcd": ETCD, "xline": XLINE}
    assert BY_KIND == {contract.KIND_ETCD: ETCD, contract.KIND_XLINE: XLINE}
    assert (ETCD.plural, ETCD.short_name) == (contract.PLURAL_ETCD, "etcdc")
    assert (XLINE.plural, XLINE.short_name) == (contract.PLURAL_XLINE, "xc")


@pytest.mark.parametrize(("engine", "version", "image", "expected"), [
    (ETCD, None, None, "gcr.io/etcd-development/etcd:v3.7.3"),
    (ETCD, "3.4.23", None, "gcr.io/etcd-development/etcd:v3.4.23"),
    (ETCD, "3.4.23", "registry.local/etcd:custom", "registry.local/etcd:custom"),
    (XLINE, None, None, "ghcr.io/xline-kv/xline:v0.7.0"),
    (XLINE, "0.6.1", None, "ghcr.io/xline-kv/xline:v0.6.1"),
    (XLINE, None, "mirror/xline@sha256:abc", "mirror/xline@sha256:abc"),
])
def test_image(engine: Engine, version: str | None, image: str | None, expected: str) -> None:
    assert engine.image(version, image) == expected


def test_commands_read_the_startup_file_the_sidecar_writes() -> None:
    assert ETCD.command() == ["etcd", "--config-file", f"{contract.RUN_MOUNT}/etcd.conf.yaml"]
    assert XLINE.command() == ["sh", "-c", f'eval "exec xline $(cat {contract.RUN_MOUNT}/xline.args)"']
    assert ETCD.command("/tmp/r") == ["etcd", "--config-file", "/tmp/r/etcd.conf.yaml"]
    assert XLINE.startup_path("/x") == "/x/xline.args"


# --- etcd config file ----------------------------------------------------------------------

@pytest.mark.parametrize("state", ["new", "existing"])
def test_etcd_config_keys(state: str) -> None:
    doc = etcd_doc(config(state=state))
    assert doc == {
        "name": "demo-1",
        "data-dir": contract.DATA_DIR,
        "listen-peer-urls": "http://0.0.0.0:2380",
        "listen-client-urls": "http://0.0.0.0:2379",
        "initial-advertise-peer-urls": "http://demo-1.demo-peer.db.svc:2380",
        "advertise-client-urls": "http://demo-1.demo-peer.db.svc:2379",
        # sorted by name, so that the file does not depend on dict order
        "initial-cluster": "demo-0=http://demo-0.demo-peer.db.svc:2380,demo-1=http://demo-1.demo-peer.db.svc:2380",
        "initial-cluster-state": state,
        "initial-cluster-token": "db/demo/0b1c2d3e",
    }


def test_etcd_tls_sections() -> None:
    tls = TLSFiles.under()
    doc = etcd_doc(config(tls=tls))
    assert doc["client-transport-security"] == {
        "cert-file": f"{contract.TLS_MOUNT}/server.crt", "key-file": f"{contract.TLS_MOUNT}/server.key",
        "trusted-ca-file": f"{contract.TLS_MOUNT}/ca.crt", "client-cert-auth": True,
    }
    assert doc["peer-transport-security"] == {
        "cert-file": f"{contract.TLS_MOUNT}/peer.crt", "key-file": f"{contract.TLS_MOUNT}/peer.key",
        "trusted-ca-file": f"{contract.TLS_MOUNT}/ca.crt", "client-cert-auth": True,
    }
    assert "client-transport-security" not in etcd_doc(config())


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("snapshot-count", "10000", 10000),
    ("quota-backend-bytes", "8589934592", 8589934592),
    ("enable-v2", "true", True),
    ("log-level", "debug", "debug"),
    ("experimental-initial-corrupt-check", "", ""),
    # The config file is typed: etcd refuses a number for this string key ...
    ("auto-compaction-retention", "1", "1"),
    ("auto-compaction-retention", "1h", "1h"),
    ("auto-compaction-mode", "revision", "revision"),
    # ... and a plain string for these list keys.
    ("log-outputs", "stderr", ["stderr"]),
    ("log-outputs", "stderr, stdout", ["stderr", "stdout"]),
    ("cipher-suites", "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384",
     ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"]),
    # Not YAML at all: passed through as the string the user wrote.
    ("cors", "[unterminated", "[unterminated"),
])
def test_etcd_options_are_typed_as_the_config_file_wants(key: str, value: str, expected: object) -> None:
    assert etcd_doc(config(options={key: value}))[key] == expected


# --- Xline arguments ------------------------------------------------------------------------

def test_xline_arguments() -> None:
    flags = flag_values(xline_argv(config(state="new")))
    assert flags == {
        "name": "demo-1",
        "members": "demo-0=http://demo-0.demo-peer.db.svc:2380,demo-1=http://demo-1.demo-peer.db.svc:2380",
        "peer-listen-urls": "http://0.0.0.0:2380",
        "peer-advertise-urls": "http://demo-1.demo-peer.db.svc:2380",
        "client-listen-urls": "http://0.0.0.0:2379",
        "client-advertise-urls": "http://demo-1.demo-peer.db.svc:2379",
        "initial-cluster-state": "new",
        "storage-engine": "rocksdb",
        "data-dir": contract.DATA_DIR,
    }


def test_xline_tls_arguments() -> None:
    flags = flag_values(xline_argv(config(tls=TLSFiles.under("/certs"))))
    assert {k: v for k, v in flags.items() if k.endswith("-path")} == {
        "peer-ca-cert-path": "/certs/ca.crt",
        "peer-cert-path": "/certs/server.crt",  # served on both ports: names the client Service too
        "peer-key-path": "/certs/server.key",
        "client-ca-cert-path": "/certs/ca.crt",
        "client-cert-path": "/certs/peer.crt",  # presented dialing other members
        "client-key-path": "/certs/peer.key",
    }
    assert not any(k.endswith("-path") for k in flag_values(xline_argv(config())))


def test_xline_options_survive_the_shell_intact() -> None:
    argv = xline_argv(config(options={"log-file": "/var/log/x y.log", "quota": "1024",
                                      "jaeger-online": "", "evil": "$(rm -rf /); `id`"}))
    flags = flag_values(argv)
    assert flags["log-file"] == "/var/log/x y.log"
    assert flags["quota"] == "1024"
    assert flags["jaeger-online"] is None
    assert flags["evil"] == "$(rm -rf /); `id`"  # one literal word, never executed


def test_both_engines_render_the_same_members_in_the_same_order() -> None:
    many = {f"demo-{i}": f"http://demo-{i}.demo-peer.db.svc:2380" for i in (3, 0, 11, 2)}
    expected = ",".join(f"{n}={u}" for n, u in sorted(many.items()))
    assert etcd_doc(config(initial_cluster=many))["initial-cluster"] == expected
    assert flag_values(xline_argv(config(initial_cluster=many)))["members"] == expected


# --- owned flags ---------------------------------------------------------------------------

@pytest.mark.parametrize(("engine", "options", "refused"), [
    (ETCD, {"data-dir": "/x"}, ["data-dir"]),
    (ETCD, {"--data-dir": "/x"}, ["--data-dir"]),
    (ETCD, {"data-dir=/x": ""}, ["data-dir=/x"]),
    (ETCD, {"initial-cluster-state": "new", "name": "x", "snapshot-count": "1"},
     ["initial-cluster-state", "name"]),
    (ETCD, {"members": "a=b"}, []),           # an Xline flag means nothing to etcd
    (ETCD, {"snapshot-count": "1"}, []),
    # Fault k: one restarts a member as a one-member cluster, the other acknowledges unsynced writes.
    (ETCD, {"force-new-cluster": "true"}, ["force-new-cluster"]),
    (ETCD, {"--unsafe-no-fsync": "true"}, ["--unsafe-no-fsync"]),
    (XLINE, {"members": "a=http://x"}, ["members"]),
    (XLINE, {"storage-engine": "memory"}, ["storage-engine"]),
    (XLINE, {"--members=a=http://x": ""}, ["--members=a=http://x"]),
    (XLINE, {"data-dir": "/x"}, ["data-dir"]),
    (XLINE, {"initial-cluster": "a=b"}, []),  # an etcd flag, not Xline's
    (XLINE, {"log-file": "/x"}, []),
])
def test_refused_options(engine: Engine, options: dict, refused: list[str]) -> None:
    assert engine.refused_options(options) == refused


@pytest.mark.parametrize("engine", [ETCD, XLINE], ids=["etcd", "xline"])
def test_every_flag_the_startup_file_sets_is_owned(engine: Engine) -> None:
    """A user option must never be able to override what the operator decided."""
    text = engine.render_startup(config(tls=TLSFiles.under()))
    if engine is ETCD:
        written = set(yaml.safe_load(text))
    else:
        written = set(flag_values(shlex.split(text)))
    assert written <= engine.owned_flags, written - engine.owned_flags
