"""The monitoring kit's alert rules, through a real promtool (built from the Go module proxy).

In the etcd tier rather than unit: it runs a binary that the component build provides
(tools/devcluster/build.py PROMTOOL), and a build that fails fails these tests. The rules are
the `spec` of kustomize/components/monitoring/prometheusrule.yaml, written out as a plain rules
file; the alert unit tests are tests/etcd/monitoring/alerts_test.yaml.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tools.devcluster import build

pytestmark = pytest.mark.etcd

ROOT = Path(__file__).resolve().parents[2]
RULE = ROOT / "kustomize" / "components" / "monitoring" / "prometheusrule.yaml"
ALERT_TESTS = Path(__file__).resolve().parent / "monitoring" / "alerts_test.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    build.ensure(build.PROMTOOL)
    return build.PROMTOOL.binary("promtool")


def rules(edit: tuple[str, str] | None = None) -> str:
    """The PrometheusRule's spec as a rules file; `edit` replaces one text in it (to show a test can fail)."""
    text = yaml.safe_dump(yaml.safe_load(RULE.read_text())["spec"], sort_keys=False)
    if edit is not None:
        assert text.count(edit[0]) == 1, edit
        text = text.replace(*edit)
    return text


def run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_rules_pass_promtool_check(promtool: Path, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(rules())
    done = run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 12 rules found" in done.stdout, done.stdout
    (tmp_path / "broken.yaml").write_text(rules(("raftset_cluster_learners > 0", "raftset_cluster_learners >")))
    broken = run(promtool, "check", "rules", "broken.yaml", cwd=tmp_path)
    assert broken.returncode != 0 and "RaftsetLearnerStuck" in broken.stdout + broken.stderr


def test_every_alert_fires_where_its_unit_test_says(promtool: Path, tmp_path: Path) -> None:
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yaml")
    (tmp_path / "rules.yaml").write_text(rules())
    done = run(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {t["alertname"] for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    alerts = {r["alert"] for g in yaml.safe_load(rules())["groups"] for r in g["rules"] if "alert" in r}
    assert tested == alerts, f"alerts without a unit test: {sorted(alerts - tested)}"


def test_a_changed_threshold_fails_the_unit_tests(promtool: Path, tmp_path: Path) -> None:
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yaml")
    (tmp_path / "rules.yaml").write_text(rules(("[1h]) > 3", "[1h]) > 30")))
    done = run(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert done.returncode != 0 and "RaftsetLeaderChangesTooFrequent" in done.stdout + done.stderr
