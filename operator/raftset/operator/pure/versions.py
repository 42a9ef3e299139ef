"""Which version changes a running cluster may make.

etcd supports two upgrades only: a patch release within a minor, and one minor forward
at a time, from a recent enough patch of the minor it leaves; it does not support
downgrades. The CRD refuses the plain cases (a skip, a downgrade) on write; this module is
what the operator checks against the version the members actually run (`status.version`),
which also catches a change made while an earlier one was still rolling out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> Version | None:
        match = _VERSION.match(text.strip())
        return cls(*map(int, match.groups())) if match else None

    @property
    def series(self) -> str:
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def of_image(image: str) -> str | None:
    """The version a `<repository>:v<version>` image names; None for a digest or another tag."""
    _, _, tag = image.rpartition(":")
    return str(Version.parse(tag)) if "/" not in tag and Version.parse(tag) else None


def refusal(running: str | None, wanted: str, floors: Mapping[str, str]) -> str | None:
    """Why the members may not go from `running` to `wanted`; None when they may.

    `floors` maps a minor series to the lowest patch of it that may move to the next
    minor (the engine's own upgrade precondition, e.g. etcd "3.5" -> "3.5.32").
    """
    old, new = Version.parse(running or ""), Version.parse(wanted)
    if old is None or new is None or old == new:
        return None  # nothing recorded yet, or an image override: nothing to compare
    if new < old:
        return f"spec.version {new} is older than the running {old}: downgrades are not supported"
    if new.major != old.major or new.minor > old.minor + 1:
        return (f"spec.version {new} skips a minor release: the members run {old}; "
                f"upgrade one minor at a time ({old.series} -> {old.major}.{old.minor + 1})")
    floor = Version.parse(floors.get(old.series, ""))
    if new.minor == old.minor + 1 and floor is not None and old < floor:
        return (f"spec.version {new}: the members run {old}, and {new.series} needs every member on "
                f"{floor} or later first; upgrade to the newest {old.series} patch, then to {new.series}")
    return None
