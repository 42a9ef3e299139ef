"""A recorded client history: what each operation asked, when, and what it got back.

The JSON form is what `lincheck` (tools/devcluster/go/lincheck) reads. An operation whose
outcome is unknown (it timed out or failed: it may or may not have taken effect) keeps its call
time and has no return time; it is never dropped. The doctoring helpers break a clean history
in one known way each, so that the checker's self-tests can prove it says no.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["put", "get", "delete", "cas"]


@dataclass(frozen=True)
class Op:
    client: int
    op: Kind
    key: str
    call: int  # monotonic nanoseconds
    returned: int | None  # None: the outcome is unknown
    value: str = ""  # put, cas: the value written (unique in a history)
    expect: str | None = None  # cas: the value compared; None: the key must be absent
    serializable: bool = False  # get: answered from one member's local state
    endpoint: str = ""
    # The answer (meaningless when the outcome is unknown):
    revision: int = 0  # the response header's revision
    found: bool = False  # get
    got: str = ""  # get: the value read
    mod_revision: int = 0  # get: the value's mod revision
    deleted: int = 0  # delete
    succeeded: bool = False  # cas
    error: str = ""  # what the client was told when the outcome is unknown

    @property
    def unknown(self) -> bool:
        return self.returned is None

    @property
    def is_write(self) -> bool:
        return self.op != "get"

    @property
    def acknowledged_write(self) -> bool:
        """A write the store acknowledged as done (a cas whose compare failed wrote nothing)."""
        return not self.unknown and (self.op == "put" or (self.op == "cas" and self.succeeded)
                                     or (self.op == "delete" and self.deleted > 0))


def to_json(ops: Sequence[Op]) -> str:
    return json.dumps({"operations": [_encode(op) for op in ops]})


def _encode(op: Op) -> dict[str, Any]:
    fields = dataclasses.asdict(op)
    fields["return"] = fields.pop("returned")
    return fields


def from_json(text: str) -> list[Op]:
    ops = []
    for fields in json.loads(text)["operations"]:
        fields["returned"] = fields.pop("return")
        ops.append(Op(**fields))
    return ops


# ---- doctoring: one known violation each


def stale_read(ops: Sequence[Op]) -> list[Op]:
    """A linearizable get now returns a value that an acknowledged write had overwritten before
    the get was called: a read from a member that lags (what a removed member that still serves
    would answer)."""
    writes = [op for op in ops if op.acknowledged_write and op.op != "delete"]
    for n, get in enumerate(ops):
        if get.op != "get" or get.serializable or get.unknown:
            continue
        for old in writes:
            if old.key != get.key or old.value == get.got:
                continue
            assert old.returned is not None
            overwritten = any(w.key == get.key and w.call > old.returned and w.returned is not None
                              and w.returned < get.call for w in writes)
            if overwritten:
                return [*ops[:n], dataclasses.replace(get, found=True, got=old.value), *ops[n + 1:]]
    raise ValueError("no linearizable get after two acknowledged writes of its key: nothing to make stale")


def lost_write(ops: Sequence[Op]) -> list[Op]:
    """An acknowledged write vanished: every get that read its value now reads what the key held
    before it (the acknowledged write that returned before it was called)."""
    writes = [op for op in ops if op.acknowledged_write and op.op != "delete"]
    for lost in reversed(writes):
        readers = [n for n, op in enumerate(ops) if op.op == "get" and not op.unknown and op.found
                   and op.key == lost.key and op.got == lost.value]
        before = [w for w in writes if w.key == lost.key and w.returned is not None and w.returned < lost.call]
        # A read concurrent with the lost write could legally have missed it; one called after it
        # was acknowledged could not.
        after = any(ops[n].call > (lost.returned or 0) for n in readers)
        if after and before:
            previous = max(before, key=lambda w: w.returned or 0)
            doctored = list(ops)
            for n in readers:
                doctored[n] = dataclasses.replace(ops[n], got=previous.value)
            return doctored
    raise ValueError("no acknowledged write that was read and had a predecessor: nothing to lose")


def stale_serializable_read(ops: Sequence[Op]) -> list[Op]:
    """A serializable get now returns an older acknowledged value of its key (with that value's
    revision) while still claiming the revision it was answered at: a member whose state
    contradicts its own revision."""
    writes = [op for op in ops if op.acknowledged_write and op.op != "delete"]
    for n, get in enumerate(ops):
        if get.op != "get" or not get.serializable or get.unknown or not get.found:
            continue
        older = [w for w in writes if w.key == get.key and w.revision < get.mod_revision]
        if older:
            old = max(older, key=lambda w: w.revision)
            return [*ops[:n], dataclasses.replace(get, got=old.value, mod_revision=old.revision), *ops[n + 1:]]
    raise ValueError("no serializable get of a key written before: nothing to make stale")
