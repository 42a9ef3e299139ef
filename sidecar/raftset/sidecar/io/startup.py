"""The files a sidecar writes on the data volume for its store: the startup file and the member marker.

Writing the startup file starts the member (the store's container waits for it); the marker is what
stale-PVC detection reads. Both go through State, so the shells see the phase and member id they set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os

from raftset.sidecar.io import marker
from raftset.sidecar.pure import join
from raftset.sidecar.pure.config import SidecarConfig
from raftset.sidecar.pure.marker import remembered
from raftset.sidecar.pure.state import State

log = logging.getLogger("raftset.sidecar")


class DataVolume:
    def __init__(self, settings: SidecarConfig, state: State) -> None:
        self.settings = settings
        self.state = state

    def write_startup(self, initial_state: str, cluster: dict[str, str], *, force_new_cluster: bool = False) -> None:
        settings = self.settings
        inputs = join.StartupInputs(
            name=settings.pod_name, naming=settings.naming, data_dir=settings.data_dir,
            peer_url=settings.peer_url, client_url=settings.client_url,
            listen_peer_url=settings.listen_peer_url, listen_client_url=settings.listen_client_url,
            cluster_token=settings.cluster_token, tls=settings.tls, options=settings.options,
            listen_metrics_url=settings.listen_metrics_url,
        )
        config = dataclasses.replace(join.startup_config(inputs, initial_state, cluster),
                                     force_new_cluster=force_new_cluster)
        text = settings.engine.render_startup(config)
        marker.write_atomic(settings.startup_path, text)
        log.info("startup file %s written (state %s, cluster %s)", settings.startup_path, initial_state,
                 ",".join(f"{k}={v}" for k, v in sorted(cluster.items())))
        self.state.startup_written = True
        self.state.phase = "started"

    def remove_startup(self) -> None:
        """The store's next start cannot run a removed member again: the join writes a new file."""
        self.state.startup_written = False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.settings.startup_path)

    def remember_member(self, member_id: int, cluster: dict[str, str] | None = None,
                        recovered: str | None = None) -> None:
        """Our member id, in memory and in the data volume's marker (stale-PVC detection reads it);
        what is not given carries over from the marker (marker.remembered)."""
        settings = self.settings
        self.state.member_id = member_id
        marker.write(settings.marker_path, remembered(
            marker.read(settings.marker_path), member_id, settings.pod_name, settings.peer_url,
            cluster=cluster, recovered=recovered))
