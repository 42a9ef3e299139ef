"""Fixtures of the e2e tier: a namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.operator import kubectl

@pytest.fixture
def namespace(control_plane: Any) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubectl(control_plane.kubeconfig, "create", "namespace", name)
    yield name
    kubectl(control_plane.kubeconfig, "delete", "namespace", name, "--wait=false", check=False)
