"""The reader of the user guide's local session (tests/harness/guide.py), which the e2e tier runs."""

from __future__ import annotations

import pytest

from tests.harness import guide

pytestmark = pytest.mark.unit

PODS = """NAME     READY   STATUS    RESTARTS   AGE   ROLE
demo-0   2/2     Running   0          3m1s  follower
demo-1   2/2     Running   0          3m1s  leader
demo-2   2/2     Running   0          3m    follower
"""


def test_the_guide_has_a_session_with_commands_and_their_output() -> None:
    steps = guide.session()
    commands = [s.command for s in steps]
    assert "kubectl scale etcdc demo --replicas=5" in commands
    assert "kubectl apply -k kustomize/samples" in commands
    assert all("  #" not in c and not c.startswith("#") for c in commands)
    move = next(s for s in steps if s.command.startswith("etcdctl move-leader"))
    assert move.shown and move.shown[0].startswith("Leadership transferred")
    assert "demo-4" in guide.member_ids_shown(steps).values()


def test_session_reads_commands_remarks_and_output() -> None:
    text = ("x\n## Try it locally\n```sh\n# a remark\nkubectl get x   # why\n# out 1\n# out 2\n\n"
            "# a remark after a blank line\nnext\n```\n")
    steps = guide.session(text)
    assert [(s.command, s.shown) for s in steps] == [("kubectl get x", ["out 1", "out 2"]), ("next", [])]


def test_ages_ids_and_addresses_are_placeholders_and_roles_compare_as_a_whole() -> None:
    shown = ["demo-0   2/2   Running   0   42s   leader", "demo-1   2/2   Running   0   42s   follower",
             "demo-2   2/2   Running   0   42s   follower"]
    assert guide.matches(shown, PODS)  # demo-1 leads here: the roles as a whole are the same
    assert not guide.matches(shown[:2] + ["demo-2   2/2   Running   0   42s   leader"], PODS)
    assert not guide.matches(["demo-3   2/2   Running   0   42s"], PODS)
    assert not guide.matches(["demo-0   1/2   Running   0   42s"], PODS)
    assert not guide.matches(shown + ["demo-0   2/2   Running   0   42s   follower"], PODS), "lines are distinct"


def test_columns_may_sit_between_the_shown_words() -> None:
    real = "| 8e9e05c52164694d | started | demo-4 | http://127.1.2.14:2380 | http://127.1.2.14:2379 | false |"
    assert guide.matches(["| 944ef74fe3c94ec7 | started | demo-4 | http://127.9.9.14:2380 | ... | false |"], real)
    assert not guide.matches(["| 944ef74fe3c94ec7 | started | demo-3 | http://127.9.9.14:2380 | false |"], real)
    moved = "Leadership transferred from ad7788b684cf400a to 944ef74fe3c94ec7"
    assert guide.matches([moved], "Leadership transferred from 7d3e0a9c11f0a27 to c20b027b76fca43"), "%x drops zeros"
    assert guide.matches(["data-kv-0   Bound    pvc-7c738911-cb55-40a5-bab3-8eec0b080503   2Gi"],
                         "data-kv-0   Bound    pvc-170947ca-e5bb-4c2c-8d03-c6b99c3f54b4   2Gi   RWO")
    assert guide.matches(["Normal ScalingIn removing demo-3"], "5m   Normal   ScalingIn   etcdcluster/demo   removing demo-3")


def test_make_runs_printed_backup_commands_are_the_sessions() -> None:
    """`make run` prints the backup steps the user guide's session runs: they cannot drift apart."""
    from tools.devcluster.__main__ import backup_guide

    printed = backup_guide("http://127.1.2.3:9000")
    assert "export S3_ENDPOINT=http://127.1.2.3:9000" in printed
    commands = [line.split("  #", 1)[0].strip() for line in printed.splitlines() if line.strip().startswith("kubectl")]
    session = [s.command for s in guide.session()]
    patch, annotate = commands[0], commands[1]
    assert patch.startswith("kubectl patch etcdc demo") and "$S3_ENDPOINT" in patch and patch in session
    assert annotate == "kubectl annotate etcdc demo raftset.dev/backup-now=true" and annotate in session
