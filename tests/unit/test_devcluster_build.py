"""Build inputs and cache paths of the etcd, Xline and cert-manager components (no builds run here)."""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile
from pathlib import Path

import pytest

from tools.devcluster import build, certmanager, sources, versions, xline

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAFTSET_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_one_wrapper_module_per_etcd_minor_pins_all_three_binaries() -> None:
    assert [c.version for c in build.ETCDS] == list(versions.ETCD)
    assert build.ETCD.version == versions.ETCD[0]  # the plane's store: the newest
    for component in build.ETCDS:
        gomod = (component.module_dir / "go.mod").read_text()
        for module in ("server", "etcdctl", "etcdutl"):
            assert re.search(rf"go\.etcd\.io/etcd/{module}/v3 v{re.escape(component.version)}\b", gomod)
        assert (component.module_dir / "go.sum").is_file()
        assert component.out_dir.name == f"etcd-{component.version}"
        assert dict(component.renames) == {"server": "etcd"}


def test_renames_are_an_input_of_the_digest() -> None:
    renamed = dataclasses.replace(build.ETCD, renames=(("server", "etcd-server"),))
    assert build.inputs_digest(renamed, "go1.26") != build.inputs_digest(build.ETCD, "go1.26")
    assert build.inputs_digest(build.ETCD, "go1.26") != build.inputs_digest(build.ETCD, "go1.25")


def test_a_component_with_its_own_source_is_rebuilt_when_a_go_file_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "go" / "lincheck"
    module.mkdir(parents=True)
    for name in ("go.mod", "go.sum", "main.go", "model.go"):
        (module / name).write_text((build.LINCHECK.module_dir / name).read_text())
    monkeypatch.setattr(versions, "GO_DIR", tmp_path / "go")
    before = build.inputs_digest(build.LINCHECK, "go1.26")
    (module / "model.go").write_text((module / "model.go").read_text() + "\n// changed\n")
    assert build.inputs_digest(build.LINCHECK, "go1.26") != before
    assert build.LINCHECK in build.COMPONENTS and build.LINCHECK.out_dir.name == f"lincheck-{versions.PORCUPINE}"


def test_xline_paths_are_keyed_by_commit_and_toolchain(_cache: Path) -> None:
    x = xline.XLINE
    assert x.out_dir == _cache / "bin" / "xline-71479a4f-rust1.74.0"
    assert x.crate_dir == _cache / "src" / "xline-71479a4f" / "xline"
    assert x.target_dir == _cache / "cargo-target" / "xline-71479a4f-1.74.0"
    assert x.label == "xline-0.6.1+71479a4f"


def test_xline_digest_follows_commit_and_toolchain_only() -> None:
    x = xline.XLINE
    assert xline.inputs_digest(x) == xline.inputs_digest(dataclasses.replace(x))
    assert xline.inputs_digest(x) != xline.inputs_digest(dataclasses.replace(x, toolchain="1.75.0"))
    assert xline.inputs_digest(x) != xline.inputs_digest(dataclasses.replace(x, commit="0123abcd"))


def test_a_cached_xline_counts_only_with_its_stamp() -> None:
    x = xline.XLINE
    digest = xline.inputs_digest(x)
    x.out_dir.mkdir(parents=True)
    x.binary().write_text("#!/bin/sh\n")
    x.binary().chmod(0o755)
    assert not xline.is_built(x, digest)
    (x.out_dir / build.STAMP).write_text("other\n")
    assert not xline.is_built(x, digest)
    (x.out_dir / build.STAMP).write_text(digest + "\n")
    assert not xline.is_built(x, digest), "a cache from before xlineutl is completed, not taken as it is"
    x.binary("xlineutl").write_text("#!/bin/sh\n")
    x.binary("xlineutl").chmod(0o755)
    assert xline.is_built(x, digest)


def _archive(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_source_archive_is_unpacked_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive(tmp_path / "src.tar.gz", {"xline/Cargo.lock": "", "vendor/madsim/Cargo.toml": ""})
    monkeypatch.setenv(xline.SOURCE_ENV, str(archive))
    crate = xline.ensure_source(xline.XLINE, log=lambda _: None)
    assert crate == xline.XLINE.crate_dir and (crate / "Cargo.lock").is_file()
    assert (xline.XLINE.source_root / "vendor" / "madsim").is_dir()
    archive.unlink()  # a second call finds the unpacked source
    assert xline.ensure_source(xline.XLINE, log=lambda _: None) == crate


def test_a_bad_source_archive_fails_loudly_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(xline.SOURCE_ENV, str(_archive(tmp_path / "src.tar.gz", {"README": ""})))
    with pytest.raises(xline.XlineBuildError, match="Cargo.lock"):
        xline.ensure_source(xline.XLINE, log=lambda _: None)
    monkeypatch.setenv(xline.SOURCE_ENV, str(tmp_path / "missing.tar.gz"))
    with pytest.raises(xline.XlineBuildError, match="not a file"):
        xline.ensure_source(xline.XLINE, log=lambda _: None)
    assert not xline.XLINE.source_root.exists()
    assert list(xline.XLINE.source_root.parent.iterdir()) == []


# --- cert-manager's controller ---------------------------------------------------------------------

def test_cert_manager_paths_are_keyed_by_release(_cache: Path) -> None:
    cm = certmanager.CERT_MANAGER
    assert cm.out_dir == _cache / "bin" / f"cert-manager-{versions.CERT_MANAGER}"
    assert cm.repo_dir == _cache / "src" / f"cert-manager-{versions.CERT_MANAGER}" / "cert-manager"
    assert cm.crds_dir == cm.out_dir / "crds"


def test_cert_manager_digest_follows_release_and_toolchain() -> None:
    cm = certmanager.CERT_MANAGER
    digest = certmanager.inputs_digest(cm, "go1.26.8")
    assert digest == certmanager.inputs_digest(dataclasses.replace(cm), "go1.26.8")
    assert digest != certmanager.inputs_digest(cm, "go1.27.0")
    assert digest != certmanager.inputs_digest(dataclasses.replace(cm, version="v1.22.0"), "go1.26.8")


def test_a_cached_cert_manager_counts_only_with_its_stamp_and_crds() -> None:
    cm = certmanager.CERT_MANAGER
    digest = certmanager.inputs_digest(cm, "go1.26.8")
    cm.out_dir.mkdir(parents=True)
    cm.binary().write_text("#!/bin/sh\n")
    cm.binary().chmod(0o755)
    (cm.out_dir / build.STAMP).write_text(digest + "\n")
    assert not certmanager.is_built(cm, digest), "no CRDs beside the binary"
    cm.crds_dir.mkdir()
    (cm.crds_dir / "cert-manager.io_certificates.yaml").write_text("kind: CustomResourceDefinition\n")
    assert certmanager.is_built(cm, digest)
    (cm.out_dir / build.STAMP).write_text("other\n")
    assert not certmanager.is_built(cm, digest)


def test_a_bad_cert_manager_archive_fails_loudly_and_leaves_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(certmanager.SOURCE_ENV, str(_archive(tmp_path / "src.tar.gz", {"README": ""})))
    with pytest.raises(certmanager.CertManagerBuildError, match="cmd/controller/go.mod"):
        certmanager.ensure_source(certmanager.CERT_MANAGER, log=lambda _: None)
    archive = _archive(tmp_path / "good.tar.gz", {"cert-manager/cmd/controller/go.mod": "module x\n"})
    monkeypatch.setenv(certmanager.SOURCE_ENV, str(archive))
    repo = certmanager.ensure_source(certmanager.CERT_MANAGER, log=lambda _: None)
    assert (repo / "cmd" / "controller" / "go.mod").is_file()
    assert [p.name for p in certmanager.CERT_MANAGER.source_root.parent.iterdir()] == [
        f"cert-manager-{versions.CERT_MANAGER}"]


# --- the shared cache steps (build.installing, build.ensure_cached, sources.ensure) ------------------

def test_an_install_lands_whole_and_stamped_or_not_at_all(_cache: Path) -> None:
    out_dir = _cache / "bin" / "thing-1"
    with pytest.raises(RuntimeError, match="compiler"):
        with build.installing("thing", out_dir, "d1") as out:
            (out / "thing").write_text("half")
            raise RuntimeError("compiler crashed")
    assert list((_cache / "bin").iterdir()) == [], "no out dir and no temporary left"
    with build.installing("thing", out_dir, "d1") as out:
        (out / "thing").write_text("old")
        (out / "thing").chmod(0o755)
    assert build.is_stamped(out_dir, "d1", [out_dir / "thing"])
    assert not build.is_stamped(out_dir, "d2", [out_dir / "thing"])
    assert not build.is_stamped(out_dir, "d1", [out_dir / "thing", out_dir / "missing"])
    with build.installing("thing", out_dir, "d2") as out:
        (out / "new").write_text("")
    assert sorted(p.name for p in out_dir.iterdir()) == [build.STAMP, "new"], "replaced, not merged"
    assert build.is_stamped(out_dir, "d2", [])
    assert [p.name for p in (_cache / "bin").iterdir()] == ["thing-1"]


def test_ensure_cached_builds_only_what_is_not_ready() -> None:
    made: list[str] = []
    build.ensure_cached("thing", lambda: True, lambda: made.append("ready"))
    ready = iter([False, True])  # another session built it while this one waited for the lock
    build.ensure_cached("thing", lambda: next(ready), lambda: made.append("raced"))
    build.ensure_cached("thing", lambda: False, lambda: made.append("built"))
    assert made == ["built"]


def test_without_an_archive_the_source_is_fetched_by_its_commands(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(xline.SOURCE_ENV, raising=False)
    monkeypatch.delenv(certmanager.SOURCE_ENV, raising=False)  # .ci/run sets both
    fetched = dataclasses.replace(xline.XLINE.source, git=(("mkdir", "xline"), ("touch", "xline/Cargo.lock")))
    assert sources.ensure(fetched, log=lambda _: None) == xline.XLINE.source_root
    assert fetched.complete
    failing = dataclasses.replace(certmanager.CERT_MANAGER.source, git=(("false",),))
    with pytest.raises(certmanager.CertManagerBuildError,
                       match=rf"\$RAFTSET_CERT_MANAGER_SOURCE is unset and `false` failed.*"
                             rf"cert-manager-{versions.CERT_MANAGER}-src\.tar\.gz"):
        sources.ensure(failing, log=lambda _: None)
    assert not failing.root.exists()
    assert [p.name for p in failing.root.parent.iterdir()] == [xline.XLINE.source_root.name]


def test_the_node_binaries_build_at_the_planes_release_in_their_own_module() -> None:
    """kube's stamp stays valid: kubelet and kube-proxy have a wrapper module of their own,
    whose graph keeps every version kube pins (so Go's build cache serves the shared packages)."""
    node, kube = build.KUBENODE, build.KUBE
    assert node.version == kube.version and node.ldflags == kube.ldflags
    assert node.module_dir != kube.module_dir and node.out_dir.name == f"kubenode-{versions.KUBERNETES}"
    pins = re.compile(r"^(?:require )?\s*(\S+) (?:=> \S+ )?(v\S+)", re.M)  # requires and replaces
    kube_pins = dict(pins.findall((kube.module_dir / "go.mod").read_text()))
    node_pins = dict(pins.findall((node.module_dir / "go.mod").read_text()))
    shared = set(kube_pins) & set(node_pins) - {"k8s.io/kube-proxy"}
    assert "k8s.io/kubernetes" in shared and len(shared) > 100
    assert {m: node_pins[m] for m in shared} == {m: kube_pins[m] for m in shared}
    assert build.COREDNS.version == versions.COREDNS == "v1.12.3"
    assert {build.KUBENODE, build.COREDNS} <= set(build.COMPONENTS), "`make test` runs the real tier"


@pytest.mark.parametrize(("goflags", "args"), [
    ("", ["-p", "2"]),
    ("-mod=mod", ["-p", "2"]),
    ("-p=1", []),
    ("-trimpath -p 1", []),
])
def test_a_callers_parallelism_wins(goflags: str, args: list[str]) -> None:
    assert build.parallelism_args(goflags) == args


def test_the_callers_goflags_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOFLAGS", "-p=1")
    assert build.go_env()["GOFLAGS"] == "-mod=readonly -buildvcs=false -p=1"
    monkeypatch.delenv("GOFLAGS")
    assert build.go_env()["GOFLAGS"] == "-mod=readonly -buildvcs=false"


def test_a_static_build_is_an_input_of_the_digest_only_where_asked() -> None:
    assert build.COREDNS.static and not build.KUBE.static
    dynamic = dataclasses.replace(build.COREDNS, static=False)
    assert build.inputs_digest(dynamic, "go1.26") != build.inputs_digest(build.COREDNS, "go1.26")


def test_the_modules_of_every_missing_component_but_the_first_download_while_it_builds() -> None:
    """The first one's build downloads its own; one built from its own source copy downloads that in its build."""
    assert build.prefetched([build.ETCD, build.KUBE, build.PROMTOOL, build.VERSITYGW]) == [build.KUBE, build.VERSITYGW]
    assert build.prefetched([build.KUBE]) == []
    assert build.prefetched([]) == []


def test_kwok_deletes_a_pod_as_kubelet_does_with_its_uid_as_a_precondition() -> None:
    """A late delete by name took the pod a roll had just re-created (a rehearsal's member restarted
    twice on one TLS revision): kwok's one pod delete is edited to carry the UID, as kubelet's does."""
    (edit,) = build.KWOK.source_edits
    assert edit.path == "pkg/kwok/controllers/pod_controller.go" and ".Delete(ctx, pod.Name," in edit.old
    assert "Preconditions: metav1.NewUIDPreconditions(string(pod.UID))" in edit.new
    assert "GracePeriodSeconds: deleteOpt.GracePeriodSeconds" in edit.new  # still at once, as before
