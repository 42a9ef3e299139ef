"""Corrupt data: which member a CORRUPT alarm or the periodic hash check hands over to member
replacement, and when a person must decide.

Pure. The leader's sidecar (raftset.sidecar.shells.maintenance) reads the active alarms, the MemberList
and every voter's HashKV at one common revision; `judge` says, for every member a CORRUPT alarm
names, whether its data is contradicted beyond doubt. Only then is it replaced (through the
pod's own repair, raftset.sidecar.pure.replace, as a diagnosis under spec.repair.policy); every
other case is a suspicion that a person decides on, because replacing the wrong member throws
away the good copy of the data:

* certain: a strict majority of the voters agree on one hash, the alarmed member's hash differs,
  and it is the only member that disagrees (or is accused). A strict majority is a quorum, so
  the members that agree keep one while the bad member is replaced;
* doubtful: a membership change is under way, fewer than three voters, a hash that cannot be
  read, members compacted at different revisions, no majority hash, an alarm whose member agrees
  with the majority (raised in error, or already repaired), more than one suspect.

Once the accused member has left Raft, its alarm has nothing left to accuse: it is disarmed.

Without any alarm, the leader's periodic hash check (`check`) applies the same rules with the
member whose hash differs in the accused's place. It never raises an alarm itself: a CORRUPT alarm
refuses every write in the cluster, while a replacement under the membership lock keeps them flowing.

While a CORRUPT alarm stands etcd refuses every write (reads and HashKV still work), the
membership lock's too: `alarm_serializes` says when the alarmed member's own replacement may
remove it without the lock.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from raftset import records
from raftset.contract import quorum
from raftset.sidecar.pure.etcd import Alarm, AlarmKind, KVHash, Member

CORRUPT = AlarmKind.CORRUPT.name


@dataclass(frozen=True)
class Verdict:
    """What the leader concluded about one member a CORRUPT alarm names."""

    member_id: int
    replace: bool  # True: contradicted beyond doubt; False: a suspicion, a person decides
    reason: str
    alarm: bool = True  # a CORRUPT alarm named it (judge); False: the periodic hash check found it (check)


@dataclass(frozen=True)
class Judgement:
    verdicts: tuple[Verdict, ...] = ()
    disarm: tuple[Alarm, ...] = ()  # CORRUPT alarms of members that have left Raft


def accused(alarms: Sequence[Alarm], members: Sequence[Member]) -> list[int]:
    """The current members a CORRUPT alarm names: only for these are the hashes worth reading."""
    ids = {m.id for m in members}
    return sorted({a.member_id for a in alarms if a.kind is AlarmKind.CORRUPT and a.member_id in ids})


def _name(member: Member) -> str:
    return f"{member.name} ({member.hex_id})" if member.name else member.hex_id


def judge(alarms: Sequence[Alarm], members: Sequence[Member], hashes: Mapping[int, KVHash | None],
          revision: int) -> Judgement:
    """The verdict on every member a CORRUPT alarm names, from every voter's hash at `revision`
    (None: it did not answer), and the alarms to disarm."""
    by_id = {m.id: m for m in members}
    corrupt = [a for a in alarms if a.kind is AlarmKind.CORRUPT]
    disarm = tuple(a for a in corrupt if a.member_id not in by_id)
    named = accused(alarms, members)
    if not named:
        return Judgement(disarm=disarm)
    doubt = _doubt(by_id, named, members, hashes, revision)
    if doubt is not None:
        return Judgement(tuple(Verdict(i, False, f"the CORRUPT alarm names member {_name(by_id[i])}, but {doubt}")
                               for i in named), disarm)
    (suspect,) = named
    voters = [m for m in members if not m.is_learner]
    agreed = Counter(h.hash for m in voters if (h := hashes.get(m.id)) is not None).most_common(1)[0]
    own = hashes[suspect]
    assert own is not None  # _doubt read every voter's hash
    return Judgement((Verdict(suspect, True, (
        f"member {_name(by_id[suspect])} raised the CORRUPT alarm and its data disagrees with the majority's: "
        f"at revision {revision} its hash is {own.hash:08x}, {agreed[1]} of {len(voters)} voters agree on "
        f"{agreed[0]:08x}")),), disarm)


def _doubt(by_id: Mapping[int, Member], named: Sequence[int], members: Sequence[Member],
           hashes: Mapping[int, KVHash | None], revision: int) -> str | None:
    """Why the data does not prove the one accused member wrong; None when it does."""
    voters = [m for m in members if not m.is_learner]
    return (_joining(members) or _too_few(voters) or _incomparable(by_id, voters, hashes, revision)
            or _contradiction(by_id, named, voters, hashes, revision))


def _joining(members: Sequence[Member]) -> str | None:
    pending = [m for m in members if m.is_learner or not m.started]
    if pending:
        return f"member {_name(pending[0])} is still joining: the data is judged once no membership change is under way"
    return None


def _too_few(voters: Sequence[Member]) -> str | None:
    if len(voters) < 3:
        return f"a majority that contradicts one member needs three voters or more ({len(voters)} here)"
    return None


def _incomparable(by_id: Mapping[int, Member], voters: Sequence[Member], hashes: Mapping[int, KVHash | None],
                  revision: int) -> str | None:
    """Why the voters' hashes cannot be compared: one is missing, or they cover different key histories."""
    unread = [m for m in voters if hashes.get(m.id) is None]
    if unread:
        return f"the hash of {', '.join(_name(m) for m in unread)} at revision {revision} could not be read"
    got = {m.id: h for m in voters if (h := hashes[m.id]) is not None}
    if len({h.revision for h in got.values()}) > 1:
        return "the hashes were read at different revisions: " + ", ".join(
            f"{_name(by_id[i])} at {h.revision}" for i, h in sorted(got.items()))
    if len({h.compact_revision for h in got.values()}) > 1:
        return "the members were compacted at different revisions, so their hashes cannot be compared: " + ", ".join(
            f"{_name(by_id[i])} at {h.compact_revision}" for i, h in sorted(got.items()))
    return None


def _majority(voters: Sequence[Member], hashes: Mapping[int, KVHash | None]) -> tuple[dict[int, int], int, int]:
    """Every voter's hash (all read), the most common one and how many voters share it."""
    hash_of = {m.id: h.hash for m in voters if (h := hashes.get(m.id)) is not None}
    agreed, count = Counter(hash_of.values()).most_common(1)[0]
    return hash_of, agreed, count


def _contradiction(by_id: Mapping[int, Member], named: Sequence[int], voters: Sequence[Member],
                   hashes: Mapping[int, KVHash | None], revision: int) -> str | None:
    """Why comparable hashes do not single out one member (the one `named`, if any); None when they do."""
    hash_of, agreed, count = _majority(voters, hashes)
    listing = ", ".join(f"{_name(by_id[i])} {h:08x}" for i, h in sorted(hash_of.items()))
    if count < quorum(len(voters)):
        return f"no strict majority of the {len(voters)} voters agrees on one hash at revision {revision} ({listing})"
    dissenters = sorted(i for i, h in hash_of.items() if h != agreed)
    suspects = sorted({*dissenters, *named})
    if not dissenters:
        return (f"every voter's data agrees at revision {revision} ({agreed:08x}): the alarm was raised in error "
                f"or the data was repaired since")
    if len(suspects) > 1:
        disagree = ", ".join(_name(by_id[i]) for i in dissenters)
        if not named:
            return f"more than one member is suspect: the data of {disagree} disagrees with the majority at " \
                   f"revision {revision} ({listing})"
        alarmed = ", ".join(_name(by_id[i]) for i in named)
        return (f"more than one member is suspect: the CORRUPT alarm names {alarmed}, the data of {disagree} "
                f"disagrees with the majority at revision {revision} ({listing})")
    return None


@dataclass(frozen=True)
class Check:
    """What the leader's periodic hash check (no alarm) concluded."""

    verdicts: tuple[Verdict, ...] = ()  # one per member whose data differs: replace, or a person decides
    compared: bool = False  # every voter's hash was read and compared: a member without a verdict agrees
    reason: str = ""  # what was found, or why nothing could be compared this time


def check(members: Sequence[Member], hashes: Mapping[int, KVHash | None], revision: int) -> Check:
    """The periodic consistency check: every voter's hash at `revision` (None: it did not answer), no alarm.

    The same rules as `judge`, with the dissenter in the accused's place: a member is replaced only
    when a strict majority of three voters or more agrees on one hash and it alone differs. Hashes
    that cannot be compared (a membership change under way, a hash unread, different revisions or
    compactions) are no finding: the next check tries again. Every other difference is a suspicion.
    """
    by_id = {m.id: m for m in members}
    voters = [m for m in members if not m.is_learner]
    not_now = _joining(members) or _incomparable(by_id, voters, hashes, revision)
    if not_now is not None or not voters:
        return Check(reason=not_now or "no voter")
    hash_of, agreed, count = _majority(voters, hashes)
    if count == len(voters):
        return Check(compared=True, reason=f"every voter's data agrees at revision {revision} ({agreed:08x})")
    doubt = _too_few(voters) or _contradiction(by_id, (), voters, hashes, revision)
    if doubt is not None:
        majority = count >= quorum(len(voters))
        suspects = sorted(i for i, h in hash_of.items() if not majority or h != agreed)
        return Check(tuple(Verdict(i, False, f"the hash check finds the data of member {_name(by_id[i])} "
                                             f"different at revision {revision}, but {doubt}", alarm=False)
                           for i in suspects), True, doubt)
    (suspect,) = (i for i, h in hash_of.items() if h != agreed)
    reason = (f"the hash check (no alarm) finds that the data of member {_name(by_id[suspect])} disagrees with the "
              f"majority's: at revision {revision} its hash is {hash_of[suspect]:08x}, {count} of {len(voters)} "
              f"voters agree on {agreed:08x}")
    return Check((Verdict(suspect, True, reason, alarm=False),), True, reason)


# What one hash check found: raftset_sidecar_outcomes_total{step="hash_check",outcome=...}.
CHECK_AGREE = "agree"  # every voter's hash compared and equal
CHECK_DIFFERS = "differs"  # one member differs beyond doubt: handed over to replacement
CHECK_UNCONFIRMED = "unconfirmed"  # a difference that is a suspicion: a person decides
CHECK_NOT_COMPARED = "not_compared"  # a hash unread, or hashes not comparable now: no finding
CHECK_OUTCOMES = (CHECK_AGREE, CHECK_DIFFERS, CHECK_UNCONFIRMED, CHECK_NOT_COMPARED)


def check_outcome(result: Check) -> str:
    """The outcome a check is counted under, so that an alert can tell a finding from a check that could not compare."""
    if any(v.replace for v in result.verdicts):
        return CHECK_DIFFERS
    if result.verdicts:
        return CHECK_UNCONFIRMED
    return CHECK_AGREE if result.compared else CHECK_NOT_COMPARED


def check_due(interval: float, alarms: Sequence[Alarm], since: float | None) -> bool:
    """Whether the leader runs its hash check now: `since` seconds after its last one (None: none yet
    while it leads), never when it is off (0), or while a CORRUPT alarm stands (`judge` compares the
    same hashes then)."""
    if interval <= 0 or any(a.kind is AlarmKind.CORRUPT for a in alarms):
        return False
    return since is None or since >= interval


def common_revision(own: Mapping[int, int | None]) -> int | None:
    """The revision the hash check compares at: the highest one every voter has applied, from each
    voter's own revision (None: one could not be read, so none is known).

    Not the leader's: a member whose revision counter fell behind for good (an Xline snapshot
    install that dropped writes in flight, docs/engines.md) never reaches the leader's revision, and
    its HashKV there would say "future revision" at every check; at its own revision the others'
    hashes cover different writes, and it is found."""
    if not own or any(r is None for r in own.values()):
        return None
    return min(r for r in own.values() if r is not None)


def report_key(verdict: Verdict) -> tuple[int, str]:
    """What makes a verdict's Event new: an alarm's reason (it stands still, writes are refused), a hash
    check's outcome only (its reason names a revision that moves with every write)."""
    if verdict.alarm:
        return verdict.member_id, verdict.reason
    return verdict.member_id, f"hash check: {'replace' if verdict.replace else 'doubt'}"


def outdated(found: CorruptionRecord | None, member_id: int, result: Check) -> bool:
    """Whether `found`, the record on `member_id`'s pod, is a hash check's verdict that a later check,
    which compared every voter, no longer makes: the member's data agrees now (or it was never judged)."""
    return (found is not None and not found.alarm and found.member == f"{member_id:x}" and result.compared
            and member_id not in {v.member_id for v in result.verdicts})


def alarm_serializes(alarms: Sequence[Alarm], member_id: int) -> bool:
    """Whether `member_id`'s replacement may remove it without the membership lock.

    A CORRUPT alarm refuses every write, the lock's lease and key too, until it is disarmed, and
    it is disarmed only once the accused member has left Raft. Meanwhile no other sidecar can take
    the lock, so the alarm itself keeps membership changes one at a time, as long as it names
    exactly one member: this one.
    """
    return {a.member_id for a in alarms if a.kind is AlarmKind.CORRUPT} == {member_id}


def lock_blocked(alarms: Sequence[Alarm], member_id: int, lock_held: bool) -> str | None:
    """Why removing `member_id` must wait under a CORRUPT alarm; None when it may go (with the lock
    when no CORRUPT alarm stands, without it when `alarm_serializes`). `lock_held`: a lock key exists,
    taken before the alarm (it cannot be released under it)."""
    named = sorted({a.member_id for a in alarms if a.kind is AlarmKind.CORRUPT})
    if not named:
        return None
    if named != [member_id]:
        return (f"a CORRUPT alarm naming {', '.join(f'{i:x}' for i in named)} refuses every write, the membership "
                f"lock's too: the replacement waits until it is disarmed (etcdctl alarm disarm)")
    if lock_held:
        return ("the membership lock was taken before the CORRUPT alarm and cannot be released under it: "
                "another membership change may be under way")
    return None


@dataclass(frozen=True)
class CorruptionRecord:
    """A verdict as the leader's sidecar writes it on the accused member's pod (contract.ANNOTATION_CORRUPTION)."""

    member: str  # hex id of the member it is about
    replace: bool
    reason: str
    alarm: bool = True  # stands while the alarm does; False: a hash check's, stands until a later check clears it

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def record(verdict: Verdict) -> CorruptionRecord:
    return CorruptionRecord(f"{verdict.member_id:x}", verdict.replace, verdict.reason, verdict.alarm)


def parse_record(raw: str | None) -> CorruptionRecord | None:
    """The record on a pod; None when absent or unreadable (raftset.records)."""
    return records.parse(raw, lambda doc: CorruptionRecord(str(doc["member"]), doc["replace"] is True, str(doc["reason"]),
                                                   doc.get("alarm", True) is not False))


def suspicion(found: CorruptionRecord | None, own_id: int | None, own_alarms: Sequence[str]) -> CorruptionRecord | None:
    """The leader's verdict on our own member: a CORRUPT alarm's while the alarm that named it still
    stands, a hash check's until a later check clears it (`outdated`).

    A verdict about an earlier member of this pod (replaced since), or one whose alarm a person
    disarmed, is no diagnosis any more.
    """
    if found is None or own_id is None or found.member != f"{own_id:x}":
        return None
    if found.alarm and CORRUPT not in own_alarms:
        return None
    return found
