"""The operator's settings read from its environment (raftset.operator.settings)."""

from __future__ import annotations

import pytest

from raftset.operator.settings import Settings, backoffs

pytestmark = pytest.mark.unit

KOPF_DEFAULT = (1, 1, 2, 3, 5, 8, 13, 21)


@pytest.mark.parametrize(("listed", "expected"), [
    (None, KOPF_DEFAULT),
    ("1,1,2", (1.0, 1.0, 2.0)),
    (" 0.5, 2 ,", (0.5, 2.0)),
    ("0", (0.0,)),
])
def test_api_error_backoffs(listed: str | None, expected: tuple[float, ...]) -> None:
    assert backoffs(listed, KOPF_DEFAULT) == expected


@pytest.mark.parametrize("listed", ["", ",", "1,x", "1,-1", "soon"])
def test_bad_api_error_backoffs_stop_the_operator_at_start_with_an_example(listed: str) -> None:
    with pytest.raises(ValueError, match=r"RAFTSET_API_ERROR_BACKOFFS must list seconds, e.g. '1,1,2,3'"):
        backoffs(listed, KOPF_DEFAULT)


def test_the_default_is_kopfs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf

    monkeypatch.delenv("RAFTSET_API_ERROR_BACKOFFS", raising=False)
    assert Settings.from_env().api_error_backoffs == tuple(kopf.OperatorSettings().networking.error_backoffs)
    monkeypatch.setenv("RAFTSET_API_ERROR_BACKOFFS", "1,2")
    assert Settings.from_env().api_error_backoffs == (1.0, 2.0)
