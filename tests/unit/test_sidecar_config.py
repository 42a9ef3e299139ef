"""Configuration, URL naming both ways, and the startup file each engine gets."""

from __future__ import annotations

import shlex

import pytest
import yaml

from raftset import engines
from raftset.engines import TLSFiles
from raftset.sidecar.pure import config
from raftset.sidecar.pure.join import StartupInputs, startup_config

pytestmark = pytest.mark.unit

ENV = {
    "RAFTSET_POD_NAME": "demo-3", "RAFTSET_NAMESPACE": "ns", "RAFTSET_CLUSTER": "demo",
    "RAFTSET_PEER_URL_TEMPLATE": "http://127.0.9.{ordinal}:2380",
    "RAFTSET_CLIENT_URL_TEMPLATE": "http://127.0.9.{ordinal}:2379",
    "RAFTSET_HTTP_ADDRESS": "127.0.9.3:18080",
}


def test_environment_with_defaults() -> None:
    s = config.parse([], ENV)
    assert (s.ordinal, s.engine, s.backend.name, s.workload_name) == (3, engines.ETCD, "StatefulSet", "demo")
    assert (s.peer_url, s.client_url) == ("http://127.0.9.3:2380", "http://127.0.9.3:2379")
    assert (s.http_host, s.http_port, s.tls) == ("127.0.9.3", 18080, None)
    assert s.marker_path == "/var/lib/raftset/data.member.json"
    assert s.startup_path == "/var/run/raftset/etcd.conf.yaml"
    assert (s.repair_automatic, s.crash_loop_restarts) == (False, 5)  # a person decides unless told otherwise
    assert s.hash_check_interval == 300.0


def test_the_hash_check_interval_is_a_setting_and_zero_turns_it_off() -> None:
    assert config.parse(["--hash-check-interval", "1.5"], ENV).hash_check_interval == 1.5
    assert config.parse([], {**ENV, "RAFTSET_HASH_CHECK_INTERVAL": "0"}).hash_check_interval == 0.0


def test_the_scratch_directory_is_read_only_for_an_engine_that_has_one() -> None:
    assert config.parse([], ENV).scratch_dir == ""
    xline = {**ENV, "RAFTSET_ENGINE": "xline", "RAFTSET_SCRATCH_DIR": "/var/lib/raftset-scratch/"}
    assert config.parse([], xline).scratch_dir == "/var/lib/raftset-scratch"
    # etcd abandons nothing: a stray setting sweeps nothing.
    assert config.parse([], {**xline, "RAFTSET_ENGINE": "etcd"}).scratch_dir == ""


def test_the_peer_status_timeout_is_a_setting() -> None:
    assert config.parse([], ENV).peer_status_timeout == 2.0
    assert config.parse(["--peer-status-timeout", "5"], ENV).peer_status_timeout == 5.0
    assert config.parse([], {**ENV, "RAFTSET_PEER_STATUS_TIMEOUT": "0.5"}).peer_status_timeout == 0.5


def test_flags_override_the_environment() -> None:
    s = config.parse(["--engine", "xline", "--workload-kind", "AdvancedStatefulSet", "--clean-grace", "7"], ENV)
    assert (s.engine, s.backend.name, s.clean_grace) == (engines.XLINE, "AdvancedStatefulSet", 7.0)
    assert s.startup_path.endswith("/xline.args")


def test_tls_switches_every_url_to_https() -> None:
    s = config.parse([], {**ENV, "RAFTSET_TLS_DIR": "/tls/", "RAFTSET_LISTEN_PEER_URL": "http://0.0.0.0:2380"})
    assert s.tls == TLSFiles.under("/tls")
    assert (s.peer_url, s.client_url, s.listen_peer_url) == (
        "https://127.0.9.3:2380", "https://127.0.9.3:2379", "https://0.0.0.0:2380")


@pytest.mark.parametrize(("change", "message"), [
    ({"RAFTSET_POD_NAME": "demo"}, "ordinal"),
    ({"RAFTSET_ENGINE": "zookeeper"}, "RAFTSET_ENGINE"),
    ({"RAFTSET_WORKLOAD_KIND": "Deployment"}, "RAFTSET_WORKLOAD_KIND"),
    ({"RAFTSET_OPTIONS": "[1]"}, "JSON object"),
    ({"RAFTSET_OPTIONS": "{"}, "not JSON"),
    ({"RAFTSET_OPTIONS": '{"data-dir": "/x"}'}, "data-dir"),
    ({"RAFTSET_HEARTBEAT_INTERVAL": "0"}, "positive"),
    ({"RAFTSET_CLEAN_GRACE": "soon"}, "seconds"),
    ({"RAFTSET_HASH_CHECK_INTERVAL": "-1"}, "RAFTSET_HASH_CHECK_INTERVAL"),
    ({"RAFTSET_PEER_STATUS_TIMEOUT": "0"}, "RAFTSET_PEER_STATUS_TIMEOUT"),
    ({"RAFTSET_HTTP_ADDRESS": "8080"}, "host:port"),
    ({"RAFTSET_REPAIR_POLICY": "automatic"}, "RAFTSET_REPAIR_POLICY"),
    ({"RAFTSET_CRASH_LOOP_RESTARTS": "0"}, "RAFTSET_CRASH_LOOP_RESTARTS"),
    ({"RAFTSET_PEER_URL_TEMPLATE": "http://{host}:2380"}, "template"),
])
def test_bad_settings_are_refused_with_a_clear_message(change: dict, message: str) -> None:
    with pytest.raises(config.SettingsError, match=message):
        config.parse([], {**ENV, **change})


def test_missing_required_setting() -> None:
    env = dict(ENV)
    del env["RAFTSET_CLUSTER"]
    with pytest.raises(config.SettingsError, match="RAFTSET_CLUSTER"):
        config.parse([], env)


POD_TEMPLATE = "http://{pod}.{cluster}-peer.{namespace}.svc:2380"


@pytest.mark.parametrize(("template", "tls"), [
    (POD_TEMPLATE, False), (POD_TEMPLATE, True), ("http://127.0.9.{ordinal}:2380", False),
    ("http://127.0.{ordinal}.1:{ordinal}2380", False),
])
def test_peer_urls_map_back_to_ordinals(template: str, tls: bool) -> None:
    naming = config.Naming("demo", "ns", template, template, tls=tls)
    for ordinal in (0, 1, 7, 12):
        assert naming.ordinal_of_peer_url(naming.peer_url(ordinal)) == ordinal
    assert naming.ordinal_of_peer_url("http://elsewhere:2380") is None
    assert naming.ordinal_of_member("demo-4", ()) == 4
    assert naming.ordinal_of_member("", (naming.peer_url(5),)) == 5
    assert naming.ordinal_of_member("other-4", ()) is None
    assert naming.ordinal_of_member("demo-x", ()) is None


def _inputs(tls: TLSFiles | None = None) -> StartupInputs:
    naming = config.Naming("demo", "ns", POD_TEMPLATE, POD_TEMPLATE.replace("2380", "2379"), tls=tls is not None)
    return StartupInputs(
        name="demo-1", naming=naming, data_dir="/var/lib/raftset/data", peer_url=naming.peer_url(1),
        client_url=naming.client_url(1), listen_peer_url="http://0.0.0.0:2380",
        listen_client_url="http://0.0.0.0:2379", cluster_token="demo.ns", tls=tls,
        options={"quota-backend-bytes": "8589934592"},
    )


CLUSTER = {"demo-0": "http://demo-0.demo-peer.ns.svc:2380", "demo-1": "http://demo-1.demo-peer.ns.svc:2380"}


def test_etcd_startup_file_for_a_joining_member() -> None:
    doc = yaml.safe_load(engines.ETCD.render_startup(startup_config(_inputs(), "existing", CLUSTER)))
    assert doc["name"] == "demo-1" and doc["initial-cluster-state"] == "existing"
    assert doc["initial-cluster"] == ",".join(f"{k}={v}" for k, v in sorted(CLUSTER.items()))
    assert doc["initial-advertise-peer-urls"] == "http://demo-1.demo-peer.ns.svc:2380"
    assert doc["quota-backend-bytes"] == 8589934592
    assert engines.ETCD.command("/run") == ["etcd", "--config-file", "/run/etcd.conf.yaml"]


def test_xline_startup_arguments_for_a_joining_member() -> None:
    text = engines.XLINE.render_startup(startup_config(_inputs(), "existing", CLUSTER))
    args = shlex.split(text)
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert flags == {
        "--name": "demo-1",
        "--members": ",".join(f"{k}={v}" for k, v in sorted(CLUSTER.items())),
        "--peer-listen-urls": "http://0.0.0.0:2380",
        "--peer-advertise-urls": "http://demo-1.demo-peer.ns.svc:2380",
        "--client-listen-urls": "http://0.0.0.0:2379",
        "--client-advertise-urls": "http://demo-1.demo-peer.ns.svc:2379",
        "--initial-cluster-state": "existing",
        "--storage-engine": "rocksdb",
        "--data-dir": "/var/lib/raftset/data",
        "--quota-backend-bytes": "8589934592",
    }


def test_xline_startup_arguments_for_a_new_cluster_with_tls() -> None:
    tls = TLSFiles.under("/tls")
    args = shlex.split(engines.XLINE.render_startup(
        startup_config(_inputs(tls), "new", {"demo-1": "https://demo-1.demo-peer.ns.svc:2380"})))
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert flags["--initial-cluster-state"] == "new"
    assert flags["--members"] == "demo-1=https://demo-1.demo-peer.ns.svc:2380"
    assert flags["--peer-advertise-urls"] == "https://demo-1.demo-peer.ns.svc:2380"
    assert (flags["--client-cert-path"], flags["--peer-key-path"], flags["--client-ca-cert-path"]) == (
        "/tls/peer.crt", "/tls/server.key", "/tls/ca.crt")
    # The store container's command evaluates exactly this file.
    assert engines.XLINE.command("/run")[-1] == 'eval "exec xline $(cat /run/xline.args)"'


def test_in_cluster_credentials_read_the_rotated_token_on_every_request(tmp_path, monkeypatch) -> None:
    from raftset.sidecar.io import kube

    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_text("")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    creds = kube.in_cluster(str(tmp_path))
    assert creds.host == "https://10.96.0.1:443" and creds.ca_file == f"{tmp_path}/ca.crt"
    assert creds.token() == "Bearer first"
    (tmp_path / "token").write_text("second")
    assert creds.token() == "Bearer second"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert kube.in_cluster(str(tmp_path)).host == "https://[fd00::1]:443"


def test_a_kubeconfig_with_static_credentials_is_read_without_the_official_client(tmp_path, monkeypatch) -> None:
    """Inline CA and token (what devcluster writes for a ServiceAccount), and files relative to the kubeconfig."""
    import base64
    import ssl

    from raftset.sidecar.io import kube
    from tests.harness.certs import write_tls_dir
    from tools.devcluster import kubeconfig

    def official(path: str | None) -> kube.Credentials:
        raise AssertionError(f"the official loader was asked for {path}")
    monkeypatch.setattr(kube, "_official_kubeconfig", official)

    tls = write_tls_dir(tmp_path / "tls", ["127.0.0.1"])
    inline = kubeconfig.write(tmp_path / "sa.kubeconfig", kubeconfig.render(
        "https://127.0.0.1:6443", tls / "ca.crt", kubeconfig.token_user("t0ken")))
    creds = kube.from_kubeconfig(str(inline))
    assert creds.host == "https://127.0.0.1:6443" and creds.token() == "Bearer t0ken"
    context = creds.ssl_context()
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert context.get_ca_certs()

    (tmp_path / "token").write_text("from-file\n")
    files = kubeconfig.render("https://127.0.0.1:6443", tls / "ca.crt", {
        "client-certificate": "tls/client.crt", "client-key": "tls/client.key", "tokenFile": "token"})
    files["clusters"][0]["cluster"] = {"server": "https://127.0.0.1:6443", "certificate-authority": "tls/ca.crt",
                                       "insecure-skip-tls-verify": True}
    creds = kube.from_kubeconfig(str(kubeconfig.write(tmp_path / "files.kubeconfig", files)))
    assert creds.ca_file == str(tls / "ca.crt") and creds.cert_file == str(tls / "client.crt")
    assert creds.token() == "Bearer from-file"
    assert creds.ssl_context().verify_mode == ssl.CERT_NONE

    pems = {"client-certificate-data": base64.b64encode((tls / "client.crt").read_bytes()).decode(),
            "client-key-data": base64.b64encode((tls / "client.key").read_bytes()).decode()}
    admin = kubeconfig.write(tmp_path / "admin.kubeconfig", kubeconfig.render(
        "https://127.0.0.1:6443", tls / "ca.crt", pems))
    creds = kube.from_kubeconfig(str(admin))
    assert creds.token() is None and isinstance(creds.ssl_context(), ssl.SSLContext)  # the chain loads


def test_a_kubeconfig_it_cannot_read_goes_to_the_official_loader(tmp_path) -> None:
    from raftset.sidecar.io import kube
    from tests.harness.certs import write_tls_dir
    from tools.devcluster import kubeconfig

    tls = write_tls_dir(tmp_path / "tls", ["127.0.0.1"])
    basic = kubeconfig.write(tmp_path / "basic.kubeconfig", kubeconfig.render(
        "https://127.0.0.1:6443", tls / "ca.crt", {"username": "a", "password": "b"}))
    assert kube.from_kubeconfig(str(basic)).token() == "Basic YTpi"
