"""The one place where etcd and Xline differ: image, binary, flags, startup file, and how
each answers the etcd v3 API calls the sidecar makes (`Capabilities`).

Everything else (the pod template, the sidecar's join/leave/clean logic, the planner)
is written once against `Engine` and never asks which engine it is talking to; where the
answers differ, the code reads a capability, not the engine's name. docs/engines.md
explains each difference and how it was measured.
"""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import yaml

from raftset import contract


@dataclass(frozen=True)
class TLSFiles:
    """Paths of the mounted certificates; `None` on the whole object means plain HTTP."""

    ca: str
    server_cert: str
    server_key: str
    peer_cert: str
    peer_key: str
    client_cert: str
    client_key: str

    @classmethod
    def under(cls, root: str = contract.TLS_MOUNT) -> TLSFiles:
        return cls(
            ca=f"{root}/ca.crt",
            server_cert=f"{root}/server.crt",
            server_key=f"{root}/server.key",
            peer_cert=f"{root}/peer.crt",
            peer_key=f"{root}/peer.key",
            client_cert=f"{root}/client.crt",
            client_key=f"{root}/client.key",
        )


@dataclass(frozen=True)
class StartupConfig:
    """What a store needs to start as one member: decided by the sidecar at join time."""

    name: str
    data_dir: str
    peer_url: str  # advertised
    client_url: str  # advertised
    listen_peer_url: str
    listen_client_url: str
    initial_cluster: Mapping[str, str]  # member name -> peer URL, this member included
    state: str  # "new" | "existing"
    cluster_token: str
    tls: TLSFiles | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    # Quorum-loss recovery only: start alone from the data dir, dropping every other member
    # (never a user option: see the owned flags).
    force_new_cluster: bool = False
    listen_metrics_url: str = ""  # the store's own /metrics (plain HTTP); "" = none of its own


def _etcd_config(cfg: StartupConfig) -> str:
    doc: dict[str, object] = {
        "name": cfg.name,
        "data-dir": cfg.data_dir,
        "listen-peer-urls": cfg.listen_peer_url,
        "listen-client-urls": cfg.listen_client_url,
        "initial-advertise-peer-urls": cfg.peer_url,
        "advertise-client-urls": cfg.client_url,
        "initial-cluster": ",".join(f"{n}={u}" for n, u in sorted(cfg.initial_cluster.items())),
        "initial-cluster-state": cfg.state,
        "initial-cluster-token": cfg.cluster_token,
    }
    if cfg.listen_metrics_url:
        doc["listen-metrics-urls"] = cfg.listen_metrics_url
    if cfg.tls:
        doc["client-transport-security"] = {
            "cert-file": cfg.tls.server_cert,
            "key-file": cfg.tls.server_key,
            "trusted-ca-file": cfg.tls.ca,
            "client-cert-auth": True,
        }
        doc["peer-transport-security"] = {
            "cert-file": cfg.tls.peer_cert,
            "key-file": cfg.tls.peer_key,
            "trusted-ca-file": cfg.tls.ca,
            "client-cert-auth": True,
        }
    if cfg.force_new_cluster:
        doc["force-new-cluster"] = True
    # etcd ignores command-line flags when --config-file is given, so user options go
    # into the file under their flag names (which are also the file's keys).
    for key, value in cfg.options.items():
        doc[key] = _etcd_option_value(key, value)
    return yaml.safe_dump(doc, sort_keys=True)


# The file is typed where the command line is not: etcd refuses a number for these
# string keys and a comma-separated string for these list keys.
_ETCD_STRING_OPTIONS = frozenset({"auto-compaction-retention", "auto-compaction-mode"})
_ETCD_LIST_OPTIONS = frozenset({"log-outputs", "cipher-suites"})


def _etcd_option_value(key: str, value: str) -> object:
    """A flag value as the config file's key wants it (numbers and booleans typed)."""
    if not value or key in _ETCD_STRING_OPTIONS:
        return value
    if key in _ETCD_LIST_OPTIONS:
        return [part.strip() for part in value.split(",") if part.strip()]
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


@dataclass(frozen=True)
class RestoreConfig:
    """What a snapshot restore needs: the first member of a new cluster, under its own name."""

    snapshot: str  # a verified snapshot file
    name: str
    peer_url: str
    data_dir: str  # must not exist yet
    cluster_token: str


def _etcd_restore(cfg: RestoreConfig) -> list[str]:
    """etcdutl writes a data dir whose membership is this one member (new IDs, new name);
    it also checks the hash etcd appends to every Maintenance.Snapshot stream."""
    return [
        "etcdutl", "snapshot", "restore", cfg.snapshot,
        "--name", cfg.name,
        "--initial-cluster", f"{cfg.name}={cfg.peer_url}",
        "--initial-advertise-peer-urls", cfg.peer_url,
        "--initial-cluster-token", cfg.cluster_token,
        "--data-dir", cfg.data_dir,
    ]


def _xline_restore(cfg: RestoreConfig) -> list[str]:
    """xlineutl replays the snapshot's tables into a RocksDB data dir. Xline keeps membership
    outside those tables (in its CURP state), so the restored dir holds data only: the member
    then bootstraps it alone with state new, under its own name and peer URL (measured: the
    keys read back, MemberList shows only the new member)."""
    return ["xlineutl", "snapshot", "restore", cfg.snapshot, "--data-dir", cfg.data_dir]


def _xline_args(cfg: StartupConfig) -> str:
    args = [
        "--name", cfg.name,
        "--members", ",".join(f"{n}={u}" for n, u in sorted(cfg.initial_cluster.items())),
        "--peer-listen-urls", cfg.listen_peer_url,
        "--peer-advertise-urls", cfg.peer_url,
        "--client-listen-urls", cfg.listen_client_url,
        "--client-advertise-urls", cfg.client_url,
        "--initial-cluster-state", cfg.state,
        "--storage-engine", "rocksdb",
        "--data-dir", cfg.data_dir,
    ]
    if cfg.listen_metrics_url:  # Xline binds 0.0.0.0 whatever the host: only the port is taken
        args += ["--metrics-port", str(urlsplit(cfg.listen_metrics_url).port or contract.METRICS_PORT)]
    if cfg.tls:
        # Xline 0.6.1 names these by direction, not by port: the "peer" identity is the one it serves
        # on both its listeners (client and peer share one tonic server config), the "client" identity
        # the one it presents dialing other members (xline_server.rs, read_tls_config). So the served
        # identity is the server certificate, whose names cover the members and the client Service;
        # the peer certificate (client auth) is what it dials with. Found on real nodes: with the two
        # the other way round, the client port served the peer certificate, which names no Service.
        args += [
            "--peer-ca-cert-path", cfg.tls.ca,
            "--peer-cert-path", cfg.tls.server_cert,
            "--peer-key-path", cfg.tls.server_key,
            "--client-ca-cert-path", cfg.tls.ca,
            "--client-cert-path", cfg.tls.peer_cert,
            "--client-key-path", cfg.tls.peer_key,
        ]
    for key, value in cfg.options.items():
        args += [f"--{key}", value] if value else [f"--{key}"]
    return shlex.join(args) + "\n"


@dataclass(frozen=True)
class Capabilities:
    """How an engine answers the etcd v3 API, where that differs between engines.

    etcd's answers are the reference; a False here is a difference the sidecar (or a person
    reading status and docs) must make up for.
    """

    # Leadership hand-off (MoveLeader to the leader) is safe under writes, so a terminating
    # leader may use it. Xline: consecutive MoveLeaders broke its clusters (election loop, or a
    # member stuck on "WrongClusterVersion"); without it an election follows the leader's exit.
    hand_off: bool
    # MoveLeader sent to a follower is refused ("not leader"); Xline forwards it. The sidecar
    # only ever asks the member it runs beside, and only when that member leads.
    move_leader_refused_by_follower: bool
    # A removed member's process exits by itself. Xline's keeps running with its ports closed:
    # the store container's TCP liveness probe on the client port ends it.
    removed_member_exits: bool
    # MemberAdd refuses a peer URL already in use, and a second learner. Xline accepts both
    # (a duplicate member, several learners): the sidecar's own checks under its lock
    # (MemberList by name and peer URL, one joining member at a time) are the only guard.
    refuses_duplicate_peer_url: bool
    refuses_second_learner: bool
    # MemberPromote of a voter is refused. Xline's server task panics: the sidecar promotes
    # only an entry MemberList shows as a learner.
    refuses_promoting_a_voter: bool
    # Status.raftIndex is the last log index; Xline reports the commit index there.
    raft_index_is_last_log_index: bool
    # Maintenance.Defragment is implemented. Xline answers it "unimplemented" (Alarm and Compact
    # work): after a NOSPACE alarm it gets the compaction and the disarm only.
    defragment: bool
    # MemberList honours linearizable=true and answers once the leader confirms. Xline's
    # linearizable MemberList timed out here as soon as a learner was in the membership
    # (measured: a 1-voter + 1-learner cluster, every call for 40 s): the sidecar asks Xline
    # for its member's own view.
    linearizable_member_list: bool = True
    # A member added by MemberAdd keeps, in every member's MemberList, the name and client URLs it
    # publishes when it starts. Xline blanks them for good (docs/engines.md, "Names lost on
    # Xline"): the member's own AddLearner entry, replayed to it, re-inserts its record blank, and
    # its start-up publish reads that record (measured: 1 first start in ~10 under load; and
    # restarts, which publish the stored record, blank too). Where False, a voter listed without a
    # name is read as the pod its peer URL belongs to: raftset only adds learners, and promotes
    # one only after its store answered, so a voter has started.
    keeps_joined_names: bool = True
    # The store can restart one member alone from its own data, dropping the others
    # (etcd's --force-new-cluster), which quorum-loss recovery needs. Xline 0.7 has no such
    # flag and no restore from a member's own snapshot: its quorum loss needs a backup.
    force_new_cluster: bool = True
    # A new cluster starts from one member and grows by MemberAdd (learner, then promote). Xline:
    # a member that bootstrapped alone keeps a stale client view of every member added later (its
    # linearizable reads fail "WrongClusterVersion / fetch cluster failed" until it restarts), so a
    # new Xline cluster's initial replicas bootstrap together, each with state new and the full
    # initial member list; MemberAdd only grows a running cluster.
    bootstrap_alone: bool = True
    # Lower-case fragments of what the store logs when it refuses to start on corrupt data
    # (its last lines reach the pod's status with terminationMessagePolicy FallbackToLogsOnError).
    # etcd: measured with a bbolt db whose meta pages were overwritten ("failed to open database",
    # "invalid database"); WAL damage reads "crc mismatch".
    corruption_texts: tuple[str, ...] = ()
    # Refusal (raftset.sidecar.io.etcdclient.Refusal member name) -> lower-case fragments of the
    # engine's own messages, for the refusals whose text differs from etcd's.
    refusal_texts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


ETCD_CAPABILITIES = Capabilities(
    hand_off=True,
    move_leader_refused_by_follower=True,
    removed_member_exits=True,
    refuses_duplicate_peer_url=True,
    refuses_second_learner=True,
    refuses_promoting_a_voter=True,
    raft_index_is_last_log_index=True,
    defragment=True,
    corruption_texts=("failed to open database", "invalid database", "crc mismatch", "checksum error",
                      "database file corrupted"),
)

# Xline 0.6.1 (71479a4f): texts from crates/curp/src/rpc/mod.rs (From<CurpError> for Status).
XLINE_CAPABILITIES = Capabilities(
    hand_off=False,
    move_leader_refused_by_follower=False,
    removed_member_exits=False,
    refuses_duplicate_peer_url=False,
    refuses_second_learner=False,
    refuses_promoting_a_voter=False,
    raft_index_is_last_log_index=False,
    defragment=False,
    refusal_texts={
        "LEARNER_NOT_READY": ("learner not caught up",),
        "MEMBER_NOT_FOUND": ("node not found",),
        "MEMBER_EXISTS": ("node already exists",),
    },
    linearizable_member_list=False,
    keeps_joined_names=False,
    force_new_cluster=False,
    bootstrap_alone=False,
    corruption_texts=("corruption:",),  # RocksDB's Status::Corruption text (not measured here)
)


@dataclass(frozen=True)
class Scratch:
    """A directory the store writes copies into and never cleans: the pod gives it an emptyDir
    the sidecar also mounts, and the sidecar removes what the store abandoned there."""

    path: str  # in the store's container
    prefix: str  # the name every such copy starts with; nothing else there is touched


@dataclass(frozen=True)
class Engine:
    """How one Raft store is named, imaged, configured and started."""

    name: str  # "etcd" | "xline": also the container name and app.kubernetes.io/name
    kind: str
    plural: str
    short_name: str
    image_repository: str
    default_version: str
    startup_file: str  # written by the sidecar into contract.RUN_MOUNT
    render_startup: Callable[[StartupConfig], str]
    command_template: tuple[str, ...]  # "{startup}" is replaced by the startup file's path
    # Flags the operator decides itself; a user may not set them through spec.options.
    owned_flags: frozenset[str]
    capabilities: Capabilities
    # Space: the option that sets the backend quota (bytes) and the engine's own default,
    # and the options that turn on periodic auto-compaction with the given retention.
    quota_option: str
    default_quota: int
    compaction_options: Callable[[str], dict[str, str]]
    # The command that turns a verified snapshot into the data dir of a new cluster's first
    # member, under that member's own name (spec.bootstrap.fromBackup).
    restore_command: Callable[[RestoreConfig], list[str]]
    # The engine's own upgrade precondition: the lowest patch of a minor series that may
    # move to the next minor (raftset.operator.pure.versions.refusal).
    upgrade_floors: Mapping[str, str] = field(default_factory=dict)
    scratch: Scratch | None = None

    def image(self, version: str | None = None, image: str | None = None) -> str:
        return image or f"{self.image_repository}:v{version or self.default_version}"

    def startup_path(self, run_dir: str = contract.RUN_MOUNT) -> str:
        return f"{run_dir}/{self.startup_file}"

    def command(self, run_dir: str = contract.RUN_MOUNT) -> list[str]:
        path = self.startup_path(run_dir)
        return [part.replace("{startup}", path) for part in self.command_template]

    def space_options(self, quota: int, retention_minutes: int) -> dict[str, str]:
        """The quota and auto-compaction the operator sets unless spec.options does."""
        return {self.quota_option: str(quota), **self.compaction_options(f"{retention_minutes}m")}

    def quota(self, options: Mapping[str, str]) -> int:
        """The backend quota in bytes these options give (the engine's default where unset or unreadable)."""
        try:
            return int(options.get(self.quota_option) or self.default_quota)
        except ValueError:
            return self.default_quota

    def refused_options(self, options: Mapping[str, str]) -> list[str]:
        """The option names in `options` that the operator owns, sorted."""
        # "data-dir=/x" is the flag data-dir too (Xline's argument parser reads it so).
        return sorted(name for name in options
                      if name.lstrip("-").split("=", 1)[0] in self.owned_flags)


_ETCD_OWNED = frozenset({
    "name", "data-dir", "wal-dir", "config-file",
    "listen-peer-urls", "listen-client-urls",
    "initial-advertise-peer-urls", "advertise-client-urls",
    "initial-cluster", "initial-cluster-state", "initial-cluster-token",
    "discovery", "discovery-srv", "discovery-srv-name", "discovery-fallback", "discovery-proxy",
    "cert-file", "key-file", "trusted-ca-file", "client-cert-auth", "auto-tls",
    "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-client-cert-auth",
    "peer-auto-tls", "client-transport-security", "peer-transport-security",
    "force-new-cluster", "unsafe-no-fsync",  # would discard membership or acknowledged writes
    "listen-metrics-urls",  # the metrics Service's port
})

_XLINE_OWNED = frozenset({
    "name", "members", "data-dir", "storage-engine",
    "peer-listen-urls", "peer-advertise-urls", "client-listen-urls", "client-advertise-urls",
    "initial-cluster-state", "is-leader",
    "peer-ca-cert-path", "peer-cert-path", "peer-key-path",
    "client-ca-cert-path", "client-cert-path", "client-key-path",
    "metrics-port",  # the metrics Service's port
})

ETCD = Engine(
    name="etcd",
    kind=contract.KIND_ETCD,
    plural=contract.PLURAL_ETCD,
    short_name="etcdc",
    image_repository="gcr.io/etcd-development/etcd",
    # The newest supported stable release; tools/devcluster/versions.py builds it.
    default_version="3.7.3",
    startup_file="etcd.conf.yaml",
    render_startup=_etcd_config,
    # The etcd images are distroless: no shell, so everything is in the config file.
    command_template=("etcd", "--config-file", "{startup}"),
    owned_flags=_ETCD_OWNED,
    capabilities=ETCD_CAPABILITIES,
    quota_option="quota-backend-bytes",
    default_quota=2 * 1024**3,  # etcd's own default
    compaction_options=lambda retention: {"auto-compaction-mode": "periodic", "auto-compaction-retention": retention},
    restore_command=_etcd_restore,
    # etcd's upgrade guides: every member on 3.5.32 or later before 3.6 (earlier patches
    # carry upgrade blockers, e.g. the "too many learner members" failure), on 3.6.11 or
    # later before 3.7.
    upgrade_floors={"3.5": "3.5.32", "3.6": "3.6.11"},
)

XLINE = Engine(
    name="xline",
    kind=contract.KIND_XLINE,
    plural=contract.PLURAL_XLINE,
    short_name="xc",
    image_repository="ghcr.io/xline-kv/xline",
    default_version="0.7.0",
    startup_file="xline.args",
    render_startup=_xline_args,
    # Xline has no config-file flag equivalent to etcd's, so the sidecar writes the
    # argument list and the (Debian-based) image's shell expands it.
    command_template=("sh", "-c", 'eval "exec xline $(cat {startup})"'),
    owned_flags=_XLINE_OWNED,
    capabilities=XLINE_CAPABILITIES,
    quota_option="quota",
    default_quota=8 * 1024**3,  # Xline's own default (crates/utils/src/config.rs default_quota)
    compaction_options=lambda retention: {"auto-compact-mode": "periodic", "auto-periodic-retention": retention},
    restore_command=_xline_restore,
    # Every snapshot Xline takes (for a follower it must catch up, or for Maintenance.Snapshot) is a
    # full copy of its database in a new /tmp/snapshot-<uuid>, a path written into its source, and
    # none is removed; its leader retries a snapshot to a member that is down, or removed by a
    # scale-in, many times a second (docs/engines.md, "Snapshot copies left in /tmp").
    scratch=Scratch(path="/tmp", prefix="snapshot-"),
)

ENGINES: dict[str, Engine] = {e.name: e for e in (ETCD, XLINE)}
BY_KIND: dict[str, Engine] = {e.kind: e for e in (ETCD, XLINE)}
