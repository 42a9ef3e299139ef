"""Which backends an install enables, which resources the operator watches, and which clusters
are refused for what it does not watch (raftset.operator.settings, raftset.operator.watches)."""

from __future__ import annotations

import pytest

from raftset.operator import watches
from raftset.operator.pure.settings import enabled_backends
from raftset.operator.settings import from_env
from raftset.operator.watches import ALL, LEASES, PDBS, PODS, SERVICES, WORKLOADS, Watches, problem

pytestmark = pytest.mark.unit

STS, ASTS = "StatefulSet", "AdvancedStatefulSet"


@pytest.mark.parametrize(("listed", "default", "expected"), [
    (None, STS, (STS,)),  # unset: the builtin one and the default kind
    (None, ASTS, (STS, ASTS)),
    ("StatefulSet", STS, (STS,)),
    ("StatefulSet, AdvancedStatefulSet", ASTS, (STS, ASTS)),
    ("AdvancedStatefulSet", ASTS, (ASTS,)),
    ("StatefulSet,StatefulSet", STS, (STS,)),
])
def test_enabled_backends(listed: str | None, default: str, expected: tuple[str, ...]) -> None:
    assert enabled_backends(listed, default) == expected


@pytest.mark.parametrize(("listed", "default", "said"), [
    ("StatefulSet,Deployment", STS, "unknown backends ['Deployment']"),
    ("StatefulSet", ASTS, "RAFTSET_DEFAULT_WORKLOAD_KIND AdvancedStatefulSet is not among"),
    ("", STS, "is not among"),
])
def test_a_wrong_backend_list_stops_the_operator_at_start_with_the_reason(listed: str, default: str,
                                                                           said: str) -> None:
    with pytest.raises(ValueError, match=said.replace("[", r"\[").replace("]", r"\]")):
        enabled_backends(listed, default)


def test_settings_read_the_backends_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTSET_DEFAULT_WORKLOAD_KIND", ASTS)
    monkeypatch.delenv("RAFTSET_BACKENDS", raising=False)
    assert from_env().backends == (STS, ASTS)
    monkeypatch.setenv("RAFTSET_DEFAULT_WORKLOAD_KIND", STS)
    assert from_env().backends == (STS,)
    monkeypatch.setenv("RAFTSET_BACKENDS", "StatefulSet,AdvancedStatefulSet")
    assert from_env().backends == (STS, ASTS)


def test_a_disabled_backends_workload_is_neither_reviewed_nor_watched() -> None:
    only_builtin = Watches(frozenset({STS}))
    assert WORKLOADS[ASTS] not in only_builtin.wanted()
    assert not only_builtin.enabled(WORKLOADS[ASTS])
    assert all(only_builtin.enabled(w) for w in ALL if w != WORKLOADS[ASTS])
    both = Watches(frozenset({STS, ASTS}))
    assert both.wanted() == ALL and all(both.enabled(w) for w in ALL)


def test_a_forbidden_watch_is_not_watched() -> None:
    decided = Watches(frozenset({STS, ASTS}), frozenset({WORKLOADS[ASTS], SERVICES}))
    assert not decided.enabled(WORKLOADS[ASTS]) and not decided.enabled(SERVICES)
    assert decided.enabled(WORKLOADS[STS]) and decided.enabled(LEASES)


def test_a_kind_the_operator_does_not_serve_is_refused_naming_the_overlay() -> None:
    reason, message = problem(ASTS, Watches(frozenset({STS}))) or ("", "")
    assert reason == "WorkloadKindNotEnabled"
    assert "workloadKind AdvancedStatefulSet is not enabled" in message
    assert "RAFTSET_BACKENDS=StatefulSet" in message and "kruise overlay" in message
    reason, message = problem(STS, Watches(frozenset({ASTS}))) or ("", "")
    assert reason == "WorkloadKindNotEnabled" and "statefulset overlay" in message


def test_only_the_clusters_that_need_a_forbidden_watch_are_refused() -> None:
    kruise_forbidden = Watches(frozenset({STS, ASTS}), frozenset({WORKLOADS[ASTS]}))
    assert problem(STS, kruise_forbidden) is None
    reason, message = problem(ASTS, kruise_forbidden) or ("", "")
    assert reason == "WatchForbidden" and "statefulsets.apps.kruise.io" in message

    drift_only = Watches(frozenset({STS, ASTS}), frozenset({SERVICES, PDBS}))
    assert problem(STS, drift_only) is None and problem(ASTS, drift_only) is None

    leases_forbidden = Watches(frozenset({STS, ASTS}), frozenset({LEASES, PODS}))
    for backend in (STS, ASTS):
        reason, message = problem(backend, leases_forbidden) or ("", "")
        assert reason == "WatchForbidden" and "leases.coordination.k8s.io, pods" in message


def test_everything_served_and_allowed_is_no_problem() -> None:
    assert problem(STS, Watches(frozenset({STS, ASTS}))) is None
    assert problem(ASTS, Watches(frozenset({STS, ASTS}))) is None


def test_watch_names_and_kopf_resources() -> None:
    assert WORKLOADS[ASTS].name == "statefulsets.apps.kruise.io"
    assert WORKLOADS[ASTS].resource == ("apps.kruise.io", "v1beta1", "statefulsets")
    assert PODS.name == "pods" and PODS.resource == ("v1", "pods")


def test_the_handlers_cannot_register_before_the_watches_are_decided() -> None:
    with pytest.raises(RuntimeError, match="decided"):
        watches.decided()
