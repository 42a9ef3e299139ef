"""What the sidecar's shells share: one value, read and updated by each shell in its own round."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from raftset.sidecar.pure import heartbeat, readiness
from raftset.sidecar.pure.corruption import CorruptionRecord
from raftset.sidecar.pure.etcd import Alarm, Status
from raftset.sidecar.pure.heartbeat import Heartbeat
from raftset.sidecar.pure.readiness import Readiness


@dataclass
class State:
    heartbeat: Heartbeat  # the last one made (the heartbeat shell publishes it)
    phase: str = "joining"  # joining | started | leaving | left
    startup_written: bool = False
    last_error: str = ""  # shown on /startup and /readyz
    status: Status | None = None  # the local member's, as the heartbeat shell last polled it
    read_error: str | None = readiness.NOT_READ_YET  # the last linearizable read's failure
    readings: tuple[readiness.Reading, ...] = ()  # the cluster's revision as those reads reported it
    lag: str | None = None  # readiness.behind's verdict at the last read
    member_id: int | None = None
    heartbeat_written_at: float | None = None  # monotonic time the heartbeat Lease was last written
    workload_owner: dict[str, Any] | None = None  # the heartbeat Lease goes with the workload
    # The membership Lease goes with the cluster object: it must outlive a deleted workload.
    cluster_owner: dict[str, Any] | None = None
    alarms: tuple[str, ...] = ()  # this member's active alarms, as the maintenance shell last read them
    cluster_alarms: tuple[Alarm, ...] = ()  # every active alarm, as the maintenance shell last read them
    index_lags: dict[str, int] = field(default_factory=dict)  # by member pod; the leader's sidecar fills it
    corruption: CorruptionRecord | None = None  # the leader's standing verdict on our member (replace shell)

    @classmethod
    def initial(cls, pod_name: str, now: datetime) -> State:
        return cls(heartbeat=heartbeat.beat(pod_name, None, now, serving=readiness.readiness("joining", None, None)))

    @property
    def readiness(self) -> Readiness:
        return readiness.readiness(self.phase, self.status, self.read_error, self.lag)

    @property
    def ready(self) -> bool:
        return self.readiness.ready

    @property
    def leading(self) -> bool:
        """Whether the leader-only loops run: our started member leads, as the last poll saw it."""
        return self.phase == "started" and self.status is not None and self.status.is_leader
