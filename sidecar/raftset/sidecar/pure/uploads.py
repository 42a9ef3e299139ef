"""Incomplete uploads a backup taker left behind, the pure part: which ones a sweep aborts.

A taker killed mid-upload (its pod deleted, its node gone, the sidecar OOM-killed) cannot
abort its multipart upload; S3 keeps, and bills, the uploaded parts until someone does. The
leader's sidecar sweeps after each backup attempt (raftset.sidecar.io.snapshots.abort_abandoned); this
module decides what it may touch, from plain data, so that every rule is unit-tested.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from raftset import backups


@dataclass(frozen=True)
class Incomplete:
    """One upload the store lists as started and neither completed nor aborted."""

    key: str
    upload_id: str
    initiated: datetime  # aware; when the store says the upload began


def abandoned(uploads: Iterable[Incomplete], *, now: datetime, older_than: timedelta,
              in_flight: Collection[str], prefix: str) -> list[Incomplete]:
    """The uploads to abort, oldest first: a snapshot of this cluster, started longer than
    `older_than` before `now`, and not one of `in_flight` (upload ids a taker is writing now).

    `prefix` is the cluster's own (raftset.backups.cluster_prefix, ending in "/"). Only a
    snapshot name directly below it counts: a deeper key belongs to another cluster whose
    prefix happens to start with ours (its taker may be uploading right now), and any other
    name is not ours to remove. An upload dated in the future (a skewed clock) is not old.
    """
    chosen = [
        upload for upload in uploads
        if upload.key.startswith(prefix)
        and backups.is_snapshot_name(upload.key[len(prefix):])
        and upload.upload_id not in in_flight
        and now - upload.initiated > older_than
    ]
    return sorted(chosen, key=lambda u: (u.initiated, u.key, u.upload_id))
