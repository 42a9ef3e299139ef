"""Names the operator and the sidecar share (raftset.contract)."""

from __future__ import annotations

import pytest

from raftset import contract

pytestmark = pytest.mark.unit


def test_label_selector_selects_the_clusters_objects_by_its_selector_labels() -> None:
    assert contract.label_selector("demo") == "app.kubernetes.io/instance=demo,app.kubernetes.io/name=raftset"
    assert dict(p.split("=") for p in contract.label_selector("demo").split(",")) == contract.selector_labels("demo")
