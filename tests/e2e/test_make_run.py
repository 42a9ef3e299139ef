"""The whole `make run`, as a user runs it: start it, type the user guide's session, stop it.

One run serves the whole test (the plane, the operator and the pod runner start once, about
a minute): the guide's commands are read from docs/user-guide.md (tests/harness/guide.py)
and each must succeed and show the lines the guide shows, within a bound (a reader waits
for a scale step too). On the way the operator is SIGKILLed mid-scale and must come back by
itself and finish; `kubectl apply -k kustomize/samples` must give an Available EtcdCluster
and XlineCluster with TLS on claimed volumes; spec.backup to make run's versitygw, enabled on
the running demo, must roll it and give BackupReady=True for a backup-now. Then a double SIGTERM (make forwards a
second one) must leave no process, no temporary directory and no volume behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import pytest

from tests.harness import engines, guide
from tests.harness.cli import Cli, existing, survivors
from tests.harness.engines import EngineUnderTest
from tests.harness.waiting import wait_for
from tools.devcluster import build, plane, versions, xline

# What the pod runner runs for the guide's and the samples' clusters: the default etcd build
# (the etcdctl on the guide's PATH too) and the one Xline build (any Xline image); the id names them.
BUILDS = (engines.DEFAULT, engines.XLINE)
pytestmark = [pytest.mark.e2e,
              pytest.mark.parametrize("builds", [BUILDS], ids=lambda b: "-".join(e.label for e in b))]

STEP_TIMEOUT = 240.0  # a scale step of two members, or a cluster made Available, on a loaded machine
START_TIMEOUT = 600.0  # builds are warm: the plane, the overlay and the operator


def run_step(step: guide.Step, env: dict[str, str], shown_ids: dict[str, str]) -> str:
    """Run one command of the guide until it succeeds and shows what the guide shows; a member
    ID in the command is the guide's, replaced by the real ID of the member the guide names."""
    command, last = step.command, ""

    def attempt() -> bool:
        nonlocal command, last
        if guide.MEMBER_ID.search(step.command):
            real = real_member_ids(env)
            command = guide.MEMBER_ID.sub(lambda m: real.get(shown_ids.get(m.group(0), ""), m.group(0)), step.command)
        done = subprocess.run(["bash", "-c", command], env=env, cwd=guide.GUIDE.parents[1], text=True,
                              capture_output=True, timeout=STEP_TIMEOUT + 60)
        last = f"exit {done.returncode}\n{done.stdout}{done.stderr}"
        return done.returncode == 0 and guide.matches(step.shown, done.stdout)
    try:
        wait_for(attempt, STEP_TIMEOUT, f"`{command}` to show what the guide shows", interval=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nguide shows:\n" + "\n".join(step.shown) + f"\nlast output:\n{last}") from None
    return last


def real_member_ids(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(["etcdctl", "member", "list", "-w", "json", "--hex"], env=env, text=True,
                         capture_output=True, check=True, timeout=30).stdout
    return {m["name"]: m["ID"] for m in json.loads(out)["members"] if m.get("name")}


def test_make_run_serves_the_user_guide_and_stops_leaving_nothing_behind(
        builds: tuple[EngineUnderTest, ...]) -> None:
    assert build.ETCD.out_dir == builds[0].bin_dir, "the guide's etcdctl is the build the id names"
    t0 = time.monotonic()
    cli = Cli("run", "--overlay", "kruise", env={"KUBECONFIG": ""})
    try:
        workdir = Path(cli.wait_match(r"export KUBECONFIG=(\S+)/admin\.kubeconfig", START_TIMEOUT).group(1))
        cli.wait_match(r"Ctrl-C stops everything", 60)
        started = time.monotonic() - t0
        exports = dict(re.findall(r"^\s*export (\w+)=(\S+)", cli.output, re.M))
        env = {**os.environ, "KUBECONFIG": exports["KUBECONFIG"], "ETCDCTL_ENDPOINTS": exports["ETCDCTL_ENDPOINTS"],
               "S3_ENDPOINT": exports["S3_ENDPOINT"], "PATH": f"{build.ETCD.out_dir}{os.pathsep}{os.environ['PATH']}"}
        assert exports["PATH"].startswith(str(build.ETCD.out_dir)), "the guide puts the built etcdctl first"
        steps = guide.session()
        shown_ids = guide.member_ids_shown(steps)
        killed = None
        for step in steps:
            run_step(step, env, shown_ids)
            if killed is None and re.fullmatch(r"kubectl scale etcdc demo --replicas=5", step.command):
                killed = int((workdir / "operator.pid").read_text())
                os.kill(killed, signal.SIGKILL)  # mid-scale: the next steps need the operator back
                wait_for(lambda: int((workdir / "operator.pid").read_text()) != killed, 60,
                         "the operator started again")
        assert killed is not None, "the guide scales the demo out"
        assert re.search(rf"operator \(pid {killed}\) exited \(-9\); restarting", cli.output)
        guided = time.monotonic() - t0 - started

        volumes = [Path(p) for p in subprocess.run(
            ["kubectl", "get", "pv", "-o", "jsonpath={.items[*].spec.hostPath.path}"], env=env, text=True,
            capture_output=True, check=True).stdout.split()]
        assert len(volumes) == 6 and all(v.parent == plane.HOSTPATH_ROOT and v.is_dir() for v in volumes), volumes
        recorded = cli.processes()
        assert len(recorded) > 20, "plane, operator, and a sidecar and a store per member"
        # An impatient user's second SIGTERM (make forwards each) lands while the teardown runs.
        cli.signal(signal.SIGTERM)
        cli.wait_match(r"stopping \(SIGTERM\)", 60)
        cli.signal(signal.SIGTERM)
        code = cli.wait_exit(120, "after two SIGTERMs")
    finally:
        cli.close()
    assert code == 0, cli.output[-4000:]
    assert survivors(recorded) == []
    assert existing([workdir, *volumes]) == []
    print(f"make run: guide printed after {started:.0f}s, the guide's {len(steps)} commands took {guided:.0f}s, "
          f"stopped in {time.monotonic() - t0 - started - guided:.0f}s")


def cache_without(root: Path, *withheld: Path) -> dict[Path, Path]:
    """A build cache holding every cached build but the `withheld` ones (each a link to this
    machine's); for each withheld build, the link that would put it there."""
    (root / "bin").mkdir(parents=True)
    for built in versions.bin_root().iterdir():
        if not built.name.startswith(".") and built not in withheld:
            (root / "bin" / built.name).symlink_to(built)
    return {root / "bin" / build_dir.name: build_dir for build_dir in withheld}


def hold(cache: Path, name: str) -> IO[str]:
    """A build's lock, taken as another session building it would hold it."""
    lock = open(cache / "bin" / f".{name}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def land(link: Path, build_dir: Path, lock: IO[str]) -> None:
    """The build lands: it is in the cache, and its lock is let go."""
    link.symlink_to(build_dir)
    lock.close()


def s3_reachable(endpoint: str) -> bool:
    """The S3 store answers HTTP at `endpoint` (any status: unsigned requests are refused)."""
    try:
        urllib.request.urlopen(endpoint, timeout=10)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def test_make_run_with_the_statefulset_overlay_brings_the_demo_to_available_before_versitygw_and_xline_are_built(
        builds: tuple[EngineUnderTest, ...], tmp_path: Path) -> None:
    """`OVERLAY=statefulset make run` (issue 29): the builtin-StatefulSet install, whose RBAC grants nothing on
    OpenKruise, on a plane where OpenKruise's CRDs are installed: the operator must neither watch them nor
    restart, and the demo becomes Available on a StatefulSet.

    In the same run, `make run` in minutes (issue 31): the builds of versitygw and Xline are withheld
    (absent from the cache, their build locks held here, as another session building them would hold
    them). The etcd demo must come up without them; the S3 store must start, and the XlineCluster demo
    appear and become Available, each once its build lands."""
    cache = tmp_path / "cache"
    (s3_link, s3_build), (xline_link, xline_build) = cache_without(
        cache, build.VERSITYGW.out_dir, xline.XLINE.out_dir).items()
    assert s3_build.is_dir() and xline_build.is_dir(), "the machine's builds, which this test lets through"
    locks = [hold(cache, build.VERSITYGW.name), hold(cache, xline.XLINE.name)]
    cli = Cli("run", "--overlay", "statefulset", env={"KUBECONFIG": "", "RAFTSET_CACHE": str(cache)})
    try:
        workdir = Path(cli.wait_match(r"export KUBECONFIG=(\S+)/admin\.kubeconfig", START_TIMEOUT).group(1))
        cli.wait_match(r"Ctrl-C stops everything", 60)
        assert "XlineCluster demo-xline is applied once Xline's build lands" in cli.output, cli.output[-2000:]
        assert "the S3 store (versitygw) starts once its build lands" in cli.output, cli.output[-2000:]
        assert "S3_ENDPOINT" not in cli.output, "no S3 store before versitygw is built"
        exports = dict(re.findall(r"^\s*export (\w+)=(\S+)", cli.output, re.M))
        env = {**os.environ, "KUBECONFIG": exports["KUBECONFIG"]}

        def kubectl(*args: str) -> str:
            return subprocess.run(["kubectl", *args], env=env, text=True, capture_output=True, check=True,
                                  timeout=60).stdout
        assert "statefulsets.apps.kruise.io" in kubectl("get", "crd", "-o", "name"), "the plane serves OpenKruise"
        wait_for(lambda: "True" == kubectl("get", "etcdc", "demo", "-o",
                                           "jsonpath={.status.conditions[?(@.type=='Available')].status}"),
                 STEP_TIMEOUT, "the demo EtcdCluster Available")
        assert kubectl("get", "etcdc", "demo", "-o", "jsonpath={.status.workloadKind}") == "StatefulSet"
        assert kubectl("get", "statefulsets.apps", "demo", "-o", "name") == "statefulset.apps/demo\n"
        assert kubectl("get", "xc", "-o", "name") == "", "no XlineCluster while Xline's build is withheld"
        land(s3_link, s3_build, locks[0])  # the background build finds it there under the lock
        cli.wait_match(r"versitygw is built: the S3 store for backups runs", 60)
        endpoint = cli.wait_match(r"export S3_ENDPOINT=(\S+)", 10).group(1)
        assert s3_reachable(endpoint), endpoint
        assert kubectl("get", "xc", "-o", "name") == "", "no XlineCluster while Xline's build is withheld"
        land(xline_link, xline_build, locks[1])
        cli.wait_match(r"Xline is built: XlineCluster demo-xline applied", 60)
        wait_for(lambda: "True" == kubectl("get", "xc", "demo-xline", "-o",
                                           "jsonpath={.status.conditions[?(@.type=='Available')].status}"),
                 STEP_TIMEOUT, "the demo XlineCluster Available")
        # kopf gave up on a forbidden watch after about a minute, long after the demo was Available:
        # the evidence is the operator's own word that it does not watch them, and no word of them since.
        log = (workdir / "operator.log").read_text()
        assert "not watched: statefulsets.apps.kruise.io" in log, log[-4000:]
        assert "statefulsets.v1beta1.apps.kruise.io" not in log, log[-4000:]
        recorded = cli.processes()
        code = cli.stop(signal.SIGTERM, 120)
    finally:
        cli.close()
        for lock in locks:
            lock.close()
    assert code == 0, cli.output[-4000:]
    assert not re.search(r"operator \(pid \d+\) .*; restarting", cli.output), "the operator never exited"
    assert survivors(recorded) == []
