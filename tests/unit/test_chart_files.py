"""The Helm chart's generated files follow the one copy (tools/chartgen.py); Helm is pinned like the
other Go components. (Helm itself runs in tests/k8s/test_helm_chart.py and tests/e2e/test_helm_install.py.)"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tools import chartgen
from tools.devcluster import build, versions

pytestmark = pytest.mark.unit


def test_committed_chart_files_are_the_generated_ones() -> None:
    stale = [str(p.relative_to(chartgen.REPO_ROOT)) for p, text in chartgen.rendered_files().items()
             if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m tools.crdgen` (or `make generate`): {stale} are out of date"


@pytest.mark.parametrize("source", chartgen.CRD_SOURCES)
def test_the_chart_crds_are_the_one_copy(source: str) -> None:
    one_copy = (chartgen.REPO_ROOT / "crds" / source).read_text()
    chart = (chartgen.CHART / "crds" / source).read_text()
    assert yaml.safe_load(chart) == yaml.safe_load(one_copy) and chart.endswith(one_copy)


def test_check_mode_names_the_copy_of_an_edited_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    for folder in ("crds", "kustomize"):
        shutil.copytree(chartgen.REPO_ROOT / folder, tmp_path / folder)
    monkeypatch.setattr(chartgen, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(chartgen, "CHART", tmp_path / "charts" / "raftset")
    assert chartgen.main([]) == 0 and chartgen.main(["--check"]) == 0
    capsys.readouterr()
    role = tmp_path / "kustomize" / "rbac" / "role.yaml"
    role.write_text(role.read_text() + "# a new rule\n")
    assert chartgen.main(["--check"]) == 1
    assert capsys.readouterr().out == "stale charts/raftset/files/rbac/role.yaml\n"


def test_helm_is_pinned_and_stamped_with_its_release() -> None:
    gomod = (build.HELM.module_dir / "go.mod").read_text()
    assert re.search(rf"^\thelm\.sh/helm/v3 {re.escape(versions.HELM)}$", gomod, re.M)
    assert re.search(rf"^\tk8s\.io/client-go v0\.{versions.HELM_KUBE_MINOR}\.\d+ ", gomod, re.M)
    assert (build.HELM.module_dir / "go.sum").is_file()
    assert f"-X helm.sh/helm/v3/internal/version.version={versions.HELM}" in build.HELM.ldflags
    assert build.HELM in build.COMPONENTS and build.HELM.out_dir.name == f"helm-{versions.HELM}"
