"""The two workload backends: which ordinals run, and how a scale step is written."""

from __future__ import annotations

import pytest

from raftset import workloads
from raftset.workloads import ADVANCED_STATEFULSET, BACKENDS, STATEFULSET, Backend, kept_ordinals

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("replicas", "reserved", "expected"), [
    (0, [], []),
    (0, [0, 1], []),
    (1, [], [0]),
    (3, [], [0, 1, 2]),
    (7, [], list(range(7))),
    (3, [1], [0, 2, 3]),
    (3, [0], [1, 2, 3]),
    (3, [0, 1, 2], [3, 4, 5]),
    (3, [5, 9], [0, 1, 2]),       # reservations beyond the top change nothing
    (2, [1, 1, 1], [0, 2]),       # duplicates are one reservation
    (4, (o for o in [1, 3]), [0, 2, 4, 5]),  # any iterable
])
def test_kept_ordinals(replicas: int, reserved: object, expected: list[int]) -> None:
    assert kept_ordinals(replicas, reserved) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("replicas", range(0, 8))
def test_kept_ordinals_skips_exactly_the_holes(replicas: int) -> None:
    for reserved in ([], [0], [2, 4], [0, 1, 2, 3]):
        kept = kept_ordinals(replicas, reserved)
        assert len(kept) == replicas and kept == sorted(set(kept))
        assert not set(kept) & set(reserved)
        if kept:
            assert set(range(kept[-1] + 1)) - set(kept) <= set(reserved)


def test_registry_and_api_versions() -> None:
    assert BACKENDS == {"StatefulSet": STATEFULSET, "AdvancedStatefulSet": ADVANCED_STATEFULSET}
    assert (STATEFULSET.api_version, STATEFULSET.kind, STATEFULSET.plural) == ("apps/v1", "StatefulSet", "statefulsets")
    assert (ADVANCED_STATEFULSET.api_version, ADVANCED_STATEFULSET.kind, ADVANCED_STATEFULSET.plural) == (
        "apps.kruise.io/v1beta1", "StatefulSet", "statefulsets")
    core = Backend(name="x", group="", version="v1", kind="X", plural="xs", supports_reserved_ordinals=False)
    assert core.api_version == "v1"


@pytest.mark.parametrize(("raw", "expected"), [
    (None, []),
    ([], []),
    ([3, 1], [1, 3]),
    ([1, 1, 2], [1, 2]),
    (["2"], [2]),
    (["1-3", 5], [1, 2, 3, 5]),
    (["4-4"], [4]),
    (["1-2", 2, "2-3"], [1, 2, 3]),
])
def test_advanced_reads_reserve_ordinals_including_ranges(raw: object, expected: list[int]) -> None:
    workload = {"spec": {"replicas": 3, "reserveOrdinals": raw}}
    assert ADVANCED_STATEFULSET.reserved(workload) == expected
    assert STATEFULSET.reserved(workload) == []  # the builtin API has no such field


@pytest.mark.parametrize(("backend", "workload", "expected"), [
    (STATEFULSET, {"spec": {"replicas": 3}}, [0, 1, 2]),
    (STATEFULSET, {"spec": {"replicas": 3, "reserveOrdinals": [0]}}, [0, 1, 2]),
    (STATEFULSET, {"spec": {}}, [0]),                   # apiserver default replicas: 1
    (STATEFULSET, {}, [0]),
    (STATEFULSET, {"spec": {"replicas": 0}}, []),
    (ADVANCED_STATEFULSET, {"spec": {"replicas": 3, "reserveOrdinals": [0]}}, [1, 2, 3]),
    (ADVANCED_STATEFULSET, {"spec": {"replicas": 2, "reserveOrdinals": ["0-1"]}}, [2, 3]),
    (ADVANCED_STATEFULSET, {"spec": {"replicas": 3}}, [0, 1, 2]),
    (ADVANCED_STATEFULSET, {"spec": None}, [0]),
])
def test_kept_reads_the_workload_object(backend: Backend, workload: dict, expected: list[int]) -> None:
    assert backend.kept(workload) == expected


@pytest.mark.parametrize(("reserved", "expected"), [([], []), ([4, 1, 4], [1, 4]), ((2,), [2])])
def test_scale_spec(reserved: list[int], expected: list[int]) -> None:
    assert STATEFULSET.scale_spec(3, reserved) == {"replicas": 3}
    assert ADVANCED_STATEFULSET.scale_spec(3, reserved) == {"replicas": 3, "reserveOrdinals": expected}


def test_scale_spec_round_trips_through_kept() -> None:
    for replicas in range(1, 8):
        for reserved in ([], [0], [1, 3], [0, 2, 4]):
            spec = ADVANCED_STATEFULSET.scale_spec(replicas, reserved)
            assert ADVANCED_STATEFULSET.kept({"spec": spec}) == kept_ordinals(replicas, reserved)
            assert STATEFULSET.kept({"spec": STATEFULSET.scale_spec(replicas, reserved)}) == list(range(replicas))


@pytest.mark.parametrize("kept", [[0], [0, 1, 2], [0, 2, 5]])
def test_removable_ordinals_per_backend(kept: list[int]) -> None:
    assert STATEFULSET.removable(kept) == kept[-1:]
    assert ADVANCED_STATEFULSET.removable(kept) == kept


def test_holes_only_where_the_api_honours_them() -> None:
    assert STATEFULSET.honoured([3, 1]) == ()
    assert ADVANCED_STATEFULSET.honoured([3, 1, 3]) == (1, 3)


def test_scale_reads_replicas_and_reservations_with_the_api_default() -> None:
    workload = {"spec": {"replicas": 3, "reserveOrdinals": [1, "4-5"]}}
    assert ADVANCED_STATEFULSET.scale(workload) == (3, [1, 4, 5])
    assert STATEFULSET.scale(workload) == (3, [])
    assert STATEFULSET.scale({"spec": {}}) == (1, [])


@pytest.mark.parametrize(("obj", "deleting"), [
    (None, False), ({}, False), ({"metadata": {}}, False),
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, True),
])
def test_being_deleted_reads_the_deletion_timestamp(obj: dict | None, deleting: bool) -> None:
    assert workloads.being_deleted(obj) is deleting
