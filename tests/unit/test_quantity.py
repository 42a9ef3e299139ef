"""The pure quantity parser reads a quantity as the Kubernetes client library does."""

from __future__ import annotations

import pytest
from kubernetes.utils.quantity import parse_quantity as library

from raftset.operator.pure.quantity import parse_quantity

pytestmark = pytest.mark.unit

CASES = ["5Gi", "500M", "1.5", "1Ki", "100m", "2E", "3Ei", "1.5Gi", "0", "1e3", "-2Gi", 5, 2.5,
         "1ki", "x", "", "Gi", "1Xi", "1i"]


def outcome(parse, quantity):  # type: ignore[no-untyped-def]
    try:
        return parse(quantity)
    except ValueError as error:
        return type(error)


@pytest.mark.parametrize("quantity", CASES)
def test_same_as_the_client_library(quantity: object) -> None:
    assert outcome(parse_quantity, quantity) == outcome(library, quantity)


def test_a_binary_suffix_and_an_unknown_one() -> None:
    assert parse_quantity("5Gi") == 5 * 1024**3
    with pytest.raises(ValueError):
        parse_quantity("1ki")
