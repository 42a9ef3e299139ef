"""`kubectl raftset`, every verb against a real cluster (issue 31, item 2).

The plugin's `main` (the console script `kubectl-raftset`, what kubectl runs for `kubectl raftset`,
is run as a process once) against the real operator, workload controllers, sidecars, etcd members
and S3 server (versitygw). One three-member EtcdCluster, backed up to a fresh bucket, serves every
test of the module (each starts from it healthy), so that the file stays within its share of
`make test`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest

from raftset import backups, contract
from raftset.plugin import cli, verbs
from tests.e2e.test_fullstack import FAST, stack
from tests.e2e.test_repair import VICTIM, ids, under_writes
from tests.harness.checker import Writer, check
from tests.harness.cli import PLUGIN
from tests.harness.engines import DEFAULT
from tests.harness.operator import Operator, delete_run_namespace, kubectl
from tests.harness.s3 import fresh_bucket
from tests.harness.view import ClusterView
from tests.harness.waiting import wait_for
from tools.devcluster.podrunner import RUN_NAMESPACE_PREFIX, PodRunner
from tools.devcluster.s3 import S3Server

pytestmark = pytest.mark.e2e

PREFIX = "e2e"


@pytest.fixture(scope="module")
def shared(control_plane: Any, operator: Operator, s3_server: S3Server,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterView, PodRunner, str]]:
    """The module's namespace, its pod runner and the cluster `kv` with backups to a fresh bucket."""
    kubeconfig = control_plane.kubeconfig
    namespace = f"{RUN_NAMESPACE_PREFIX}{uuid.uuid4().hex[:8]}"
    kubectl(kubeconfig, "create", "namespace", namespace)
    workdir = tmp_path_factory.mktemp("plugin")
    try:
        with PodRunner(kubeconfig, workdir / "runner", namespace=namespace) as runner:
            bucket = fresh_bucket(s3_server)
            kubectl(kubeconfig, "create", "secret", "generic", "s3-credentials", "-n", namespace,
                    f"--from-literal={contract.ACCESS_KEY_FILE}={s3_server.access_key}",
                    f"--from-literal={contract.SECRET_KEY_FILE}={s3_server.secret_key}")
            kv = stack(kubeconfig, namespace, "kv", runner)
            kv.create(3, workloadKind="StatefulSet", version=DEFAULT.version, backup={"s3": {
                "endpoint": s3_server.endpoint, "bucket": bucket, "prefix": PREFIX,
                "credentialsSecret": "s3-credentials"}}, **FAST)
            kv.wait_healthy(0, 1, 2)
            yield kv, runner, namespace
        assert not runner.supervisor.procs, "the runner left processes behind"
    finally:
        delete_run_namespace(kubeconfig, namespace)


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def plugin(kubeconfig: str, *args: str, stdin: str = "") -> Ran:
    """`kubectl raftset ARGS`, run in this process (the console script's own `main`): a process per
    call costs seconds on a loaded runner. The console script itself is run once, in the first test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch.object(sys, "stdin", io.StringIO(stdin)):
        try:
            code = cli.main(["--kubeconfig", kubeconfig, *args])
        except SystemExit as exc:  # argparse: --help, usage errors
            code = int(exc.code or 0)
    ran = Ran(code, out.getvalue(), err.getvalue())
    print(f"$ kubectl raftset {' '.join(args)}  -> {code}\n{ran.stdout}{ran.stderr}")
    return ran


def healthy(kv: ClusterView) -> None:
    """Three voters by the members' own word, then by the operator's status: the status trails Raft by
    a round (a rehearsal read `learner` for a member that etcd already listed as a voter)."""
    kv.wait_healthy(0, 1, 2)

    def settled() -> bool:
        members = kv.status().get("members") or []
        return (kv.condition("Available").get("status") == "True" and len(members) == 3
                and not any(m.get("learner") for m in members)
                and kv.condition("Progressing").get("status") == "False")
    wait_for(settled, 90, "kv Available and settled with three voters in status")


def test_status_why_and_the_exit_codes_scripts_use(control_plane: Any,
                                                   shared: tuple[ClusterView, PodRunner, str]) -> None:
    kv, _, namespace = shared
    config = control_plane.kubeconfig
    healthy(kv)
    # The console script kubectl runs for `kubectl raftset` (pyproject's entry point), as a process.
    shown = subprocess.run([PLUGIN, "--kubeconfig", config, "status", "kv", "-n", namespace],
                           capture_output=True, text=True, timeout=120, check=False)
    print(shown.stdout, shown.stderr)
    assert shown.returncode == verbs.OK
    leader = kv.status()["leader"]
    assert f"EtcdCluster {namespace}/kv" in shown.stdout and f"leader {leader}" in shown.stdout
    assert all(f"kv-{o}" in shown.stdout for o in range(3)) and "Available" in shown.stdout
    document = json.loads(plugin(config, "status", "kv", "-n", namespace, "-o", "json", "--kind", "etcdc").stdout)
    assert sorted(m["ordinal"] for m in document["members"]) == [0, 1, 2]
    assert {m["role"] for m in document["members"]} == {"leader", "follower"}
    assert all(m["node"] and m["id"] for m in document["members"]), document["members"]

    why = plugin(config, "-n", namespace, "why", "kv")  # kubectl's options before the verb too
    assert why.returncode == verbs.OK and why.stdout.startswith(f"EtcdCluster {namespace}/kv: serving")
    # The module's cluster runs without TLS (its members are asked over http): said, though it serves.
    assert "Encrypted is False (TLSDisabled)" in why.stdout
    assert "Creating (EtcdCluster/kv): creating 3 members" in why.stdout
    document = json.loads(plugin(config, "why", "kv", "-n", namespace, "-o", "json").stdout)
    assert document["serving"] and any(e["reason"] for e in document["events"]), document["events"]

    assert plugin(config, "status", "nope", "-n", namespace).returncode == verbs.NOT_READY
    assert plugin(config, "status", "kv", "-n", namespace, "--kind", "xc").returncode == verbs.NOT_READY
    assert plugin(config, "status", "kv", "-n", namespace, "--kind", "zookeeper").returncode == verbs.USAGE
    assert plugin(config, "restore", "kv", "-n", namespace).returncode == verbs.USAGE  # --from and --as missing


def test_recover_quorum_shows_the_survivors_asks_and_reports_the_operators_refusal(
        control_plane: Any, shared: tuple[ClusterView, PodRunner, str]) -> None:
    """On a cluster that has quorum every member survives and the operator refuses the request: the
    plugin ranks what the sidecars report, asks, writes the annotation only once told yes, and
    exits 1 with the operator's RecoveryRefused."""
    kv, _, namespace = shared
    config = control_plane.kubeconfig
    healthy(kv)
    declined = plugin(config, "recover-quorum", "kv", "-n", namespace, stdin="n\n")
    assert declined.returncode == verbs.FAILED and "nothing done" in declined.stdout
    assert "[y/N]" in declined.stderr
    assert all(f"kv-{o}" in declined.stdout for o in range(3)) and "`auto` would choose" in declined.stdout
    assert contract.ANNOTATION_RECOVER_QUORUM not in (kv.obj()["metadata"].get("annotations") or {})

    refused = plugin(config, "recover-quorum", "kv", "-n", namespace, "--from", "kv-1", "--yes", "-o", "json",
                     "--timeout", "90")
    assert refused.returncode == verbs.FAILED, refused.stderr
    document = json.loads(refused.stdout)
    assert document["outcome"] == "Refused" and "recover-quorum=kv-1 refused" in document["message"]
    assert len(document["survivors"]) == 3 and document["auto"] in {f"kv-{o}" for o in range(3)}
    assert contract.ANNOTATION_RECOVER_QUORUM not in (kv.obj()["metadata"].get("annotations") or {})


def test_replace_follows_the_steps_until_the_new_member_votes(control_plane: Any,
                                                             shared: tuple[ClusterView, PodRunner, str]) -> None:
    kv, _, namespace = shared
    healthy(kv)
    victim = contract.pod_name(kv.name, VICTIM)
    old, writer = under_writes(kv)
    try:
        done = plugin(control_plane.kubeconfig, "replace", victim, "-n", namespace, "--timeout", "150",
                      "-o", "json")
        written = writer.ok
        wait_for(lambda: writer.ok > written + 20, 30, "writes flowing after the replacement")
    finally:
        writer.stop()
    assert done.returncode == verbs.OK, done.stderr
    document = json.loads(done.stdout)
    assert document["phase"] == "Done" and int(document["oldMember"], 16) == old
    assert int(document["newMember"], 16) == ids(kv)[victim] != old
    for step in ("Removing", "Rejoining", "Learner", "Done"):
        assert f"  {step}" in done.stderr, done.stderr  # the progress, one line per step
    asyncio.run(check([kv.url(o) for o in (0, 1, 2)], writer.acked))


def test_backup_lists_it_and_restore_creates_a_new_cluster_from_it(
        control_plane: Any, shared: tuple[ClusterView, PodRunner, str]) -> None:
    kv, runner, namespace = shared
    config = control_plane.kubeconfig
    healthy(kv)
    writer = Writer([kv.url(o) for o in range(3)])
    writer.start()
    try:
        wait_for(lambda: writer.ok > 30, 30, "the writer running")
        taken = plugin(config, "backup", "kv", "-n", namespace, "--timeout", "120")
    finally:
        writer.stop()
    assert taken.returncode == verbs.OK, taken.stderr
    success = kv.status()["backup"]["lastSuccess"]
    assert success["key"] in taken.stdout

    listed = plugin(config, "backups", "kv", "-n", namespace, "-o", "json")
    assert listed.returncode == verbs.OK
    document = json.loads(listed.stdout)
    assert document["prefix"] == backups.cluster_prefix(PREFIX, namespace, "kv")
    assert document["backups"][0]["key"] == success["key"] == document["latest"]
    assert document["backups"][0]["sha256"] == success["sha256"]
    assert success["key"] in plugin(config, "backups", "kv", "-n", namespace).stdout

    restored = plugin(config, "restore", "kv", "-n", namespace, "--from", success["key"], "--as", "kv2",
                      "--replicas", "1", "--timeout", "150")
    assert restored.returncode == verbs.OK, restored.stderr
    kv2 = stack(config, namespace, "kv2", runner)
    assert kv2.obj()["spec"]["bootstrap"]["fromBackup"] == {
        "backup": success["key"], "cluster": "kv", "s3": kv.obj()["spec"]["backup"]["s3"]}
    in_snapshot = {k: a for k, a in writer.acked.items() if a.revision <= success["revision"]}
    verdict = asyncio.run(check([kv2.url(0)], in_snapshot))
    assert verdict.acknowledged == len(in_snapshot) > 30
    again = plugin(config, "restore", "kv", "-n", namespace, "--from", "latest", "--as", "kv2", "--no-wait")
    assert again.returncode == verbs.FAILED and "exists already" in again.stderr


def test_the_kind_is_found_by_name_and_a_name_both_kinds_have_needs_kind(control_plane: Any, operator: Operator,
                                                                         namespace: str) -> None:
    """An XlineCluster is found without --kind; an EtcdCluster of the same name makes the name ambiguous
    (exit 2) until --kind says which. No pod runner: kwok's pods run nothing, so neither is Available
    (exit 3), and neither backs up, so the backup verbs have nothing to act on (exit 3)."""
    config = control_plane.kubeconfig
    ClusterView(config, contract.KIND_XLINE, "twin", namespace).create(1)
    shown = plugin(config, "status", "twin", "-n", namespace, "-o", "json")
    assert shown.returncode == verbs.NOT_READY
    assert (json.loads(shown.stdout)["kind"], json.loads(shown.stdout)["serving"]) == (contract.KIND_XLINE, False)
    assert plugin(config, "why", "twin", "-n", namespace).returncode == verbs.NOT_READY
    for verb in (("backup", "twin"), ("backups", "twin"), ("restore", "twin", "--from", "latest", "--as", "x")):
        assert plugin(config, *verb, "-n", namespace).returncode == verbs.NOT_READY, verb

    ClusterView(config, contract.KIND_ETCD, "twin", namespace).create(1)
    ambiguous = plugin(config, "status", "twin", "-n", namespace)
    assert ambiguous.returncode == verbs.USAGE and "--kind" in ambiguous.stderr
    assert json.loads(plugin(config, "status", "twin", "-n", namespace, "--kind", "xc", "-o", "json").stdout
                      )["kind"] == contract.KIND_XLINE
    assert json.loads(plugin(config, "status", "twin", "-n", namespace, "--kind", "EtcdCluster", "-o", "json").stdout
                      )["kind"] == contract.KIND_ETCD
