"""The sidecar's configuration: environment variables, each overridable by a flag.

The operator renders the environment (see docs/sidecar.md for every variable); tests
start the same process with loopback templates such as `http://127.0.9.{ordinal}:2380`.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from raftset import contract, engines, workloads
from raftset.contract import SidecarEnv
from raftset.engines import Engine, TLSFiles
from raftset.fields import REPAIR_POLICIES, SPEC_FIELDS
from raftset.sidecar.pure import maintenance
from raftset.workloads import Backend

# spec.maintenance.hashCheckIntervalSeconds's default, so that the operator renders only a tuned one.
HASH_CHECK_DEFAULT_S: int = SPEC_FIELDS["maintenance.hashCheckIntervalSeconds"].default

# (variable, flag, help, default); None = required.
_VARS: tuple[tuple[str, str, str, str | None], ...] = (
    (SidecarEnv.POD_NAME, "--pod-name", "this pod's name; its ordinal is the numeric suffix", None),
    (SidecarEnv.NAMESPACE, "--namespace", "the pod's namespace", "default"),
    (SidecarEnv.CLUSTER, "--cluster", "the cluster (custom resource) name", None),
    (SidecarEnv.ENGINE, "--engine", "etcd | xline", "etcd"),
    (SidecarEnv.WORKLOAD_KIND, "--workload-kind", "StatefulSet | AdvancedStatefulSet", "StatefulSet"),
    (SidecarEnv.WORKLOAD_NAME, "--workload-name", "the workload object's name (default: the cluster)", ""),
    (SidecarEnv.PEER_URL_TEMPLATE, "--peer-url-template", "advertised peer URL; {pod} {ordinal} {cluster} {namespace}",
     "http://{pod}.{cluster}-peer.{namespace}.svc:2380"),
    (SidecarEnv.CLIENT_URL_TEMPLATE, "--client-url-template", "advertised client URL, same fields",
     "http://{pod}.{cluster}-peer.{namespace}.svc:2379"),
    (SidecarEnv.LISTEN_PEER_URL, "--listen-peer-url", "the store's peer listen URL", "http://0.0.0.0:2380"),
    (SidecarEnv.LISTEN_CLIENT_URL, "--listen-client-url", "the store's client listen URL", "http://0.0.0.0:2379"),
    (SidecarEnv.LISTEN_METRICS_URL, "--listen-metrics-url",
     "where the store serves its own /metrics (plain HTTP); empty: nowhere of its own", ""),
    (SidecarEnv.HTTP_ADDRESS, "--http-address", "host:port of the sidecar's HTTP server", "0.0.0.0:8080"),
    (SidecarEnv.DATA_DIR, "--data-dir", "the store's data directory (in the data volume)", contract.DATA_DIR),
    (SidecarEnv.RUN_DIR, "--run-dir", "directory shared with the store for its startup file", contract.RUN_MOUNT),
    (SidecarEnv.TLS_DIR, "--tls-dir", "directory of ca.crt, server/peer/client .crt/.key; empty = plaintext", ""),
    (SidecarEnv.SCRATCH_DIR, "--scratch-dir",
     "where the sidecar sees the store's scratch volume, to remove the copies the store abandons there; "
     "empty = the engine has none", ""),
    (SidecarEnv.HEARTBEAT_INTERVAL, "--heartbeat-interval",
     "seconds between heartbeat Lease renewals when nothing changed (Lease duration: 3x)", "10"),
    (SidecarEnv.POLL_INTERVAL, "--poll-interval", "seconds between polls of the local member's status", "2"),
    (SidecarEnv.CLEAN_INTERVAL, "--clean-interval", "seconds between membership-clean rounds", "30"),
    (SidecarEnv.CLEAN_GRACE, "--clean-grace", "seconds a member must be absent before clean removes it", "300"),
    (SidecarEnv.PEER_STATUS_TIMEOUT, "--peer-status-timeout",
     "seconds to wait for each other member's Status; one that does not answer in time counts as down", "2"),
    (SidecarEnv.LEAVE_TIMEOUT, "--leave-timeout",
     "upper bound in seconds for one leave; below the pod's terminationGracePeriodSeconds", "45"),
    (SidecarEnv.LOOP_STALL, "--loop-stall",
     "seconds a background loop may go beyond its interval without progress before /livez fails", "120"),
    (SidecarEnv.REPAIR_POLICY, "--repair-policy",
     "Manual | Automatic: whether a corrupt or crash-looping member replaces itself", "Manual"),
    (SidecarEnv.CRASH_LOOP_RESTARTS, "--crash-loop-restarts",
     "store restarts that make a crash loop worth a replacement", "5"),
    (SidecarEnv.OPTIONS, "--options", "JSON map of extra engine flags", "{}"),
    (SidecarEnv.MAINTENANCE_INTERVAL, "--maintenance-interval",
     "seconds between the leader's alarm and defragmentation rounds", "10"),
    (SidecarEnv.HASH_CHECK_INTERVAL, "--hash-check-interval",
     "seconds between the leader's comparisons of every voter's HashKV at one revision; 0 = off",
     str(HASH_CHECK_DEFAULT_S)),
    (SidecarEnv.DEFRAG_SCHEDULE, "--defrag-schedule", "cron schedule of a defragmentation of every member", ""),
    (SidecarEnv.DEFRAG_THRESHOLD_PERCENT, "--defrag-threshold-percent",
     "defragment a member whose free pages reach this share of its backend file; 0 = off", "0"),
    (SidecarEnv.DEFRAG_MIN_BYTES, "--defrag-min-bytes",
     "free pages below this many bytes are never worth a threshold defragmentation", str(64 * 1024 * 1024)),
    (SidecarEnv.LOG_LEVEL, "--log-level", "DEBUG | INFO | WARNING", "INFO"),
    (SidecarEnv.BACKUP_INTERVAL, "--backup-interval",
     "seconds between the leader's checks for a due or requested backup", "10"),
    (SidecarEnv.BACKUP_MOUNT_ROOT, "--backup-mount-root",
     "directory prepended to the backup and restore mount paths (tests); empty in a pod", ""),
    (SidecarEnv.BACKUP_MOUNTS, "--backup-mounts",
     "the backup destination's Secrets or claim this pod mounts (the operator renders it); empty: none", ""),
)

_TEMPLATE_FIELDS = ("pod", "ordinal", "cluster", "namespace")


class SettingsError(ValueError):
    """A setting is missing or malformed."""


@dataclass(frozen=True)
class Naming:
    """How pods, members and URLs are named; pure, so that decisions can use it."""

    cluster: str
    namespace: str
    peer_template: str
    client_template: str
    tls: bool = False

    def pod(self, ordinal: int) -> str:
        return contract.pod_name(self.cluster, ordinal)

    def _render(self, template: str, ordinal: int) -> str:
        url = template.format(pod=self.pod(ordinal), ordinal=ordinal, cluster=self.cluster, namespace=self.namespace)
        return with_scheme(url, self.tls)

    def peer_url(self, ordinal: int) -> str:
        return self._render(self.peer_template, ordinal)

    def client_url(self, ordinal: int) -> str:
        return self._render(self.client_template, ordinal)

    def initial_cluster(self, ordinals: Sequence[int]) -> dict[str, str]:
        """Pod name -> peer URL of these ordinals: the member list a cluster bootstrapped together starts with."""
        return {self.pod(o): self.peer_url(o) for o in sorted(ordinals)}

    def ordinal_of_name(self, name: str) -> int | None:
        prefix = f"{self.cluster}-"
        if not name.startswith(prefix) or not name[len(prefix):].isdigit():
            return None
        return int(name[len(prefix):])

    def ordinal_of_peer_url(self, url: str) -> int | None:
        """Reverse the peer template; None for a URL this cluster would never advertise."""
        pattern = re.escape(with_scheme(self.peer_template, self.tls))
        for name in _TEMPLATE_FIELDS:
            token = re.escape("{" + name + "}")
            value = {
                "pod": re.escape(f"{self.cluster}-") + r"(?P<p>\d+)",
                "ordinal": r"(?P<o>\d+)",
                "cluster": re.escape(self.cluster),
                "namespace": re.escape(self.namespace),
            }[name]
            # A field may appear twice; only the first occurrence may define a group.
            pattern = pattern.replace(token, value, 1).replace(token, re.sub(r"\(\?P<\w>", "(?:", value))
        match = re.fullmatch(pattern, url)
        if not match:
            return None
        ordinal = match.groupdict().get("o") or match.groupdict().get("p")
        return int(ordinal) if ordinal is not None else None

    def advertised(self, peer_urls: Sequence[str]) -> tuple[str, str] | None:
        """The pod name and client URL of the pod that advertises one of these peer URLs; None if none does."""
        ordinal = next((o for o in map(self.ordinal_of_peer_url, peer_urls) if o is not None), None)
        return None if ordinal is None else (self.pod(ordinal), self.client_url(ordinal))

    def ordinal_of_member(self, name: str, peer_urls: Sequence[str]) -> int | None:
        """Started members by name (the pod's), unstarted ones by their peer URL."""
        by_name = self.ordinal_of_name(name) if name else None
        if by_name is not None:
            return by_name
        for url in peer_urls:
            ordinal = self.ordinal_of_peer_url(url)
            if ordinal is not None:
                return ordinal
        return None


def with_scheme(url: str, tls: bool) -> str:
    """Templates are written with http://; TLS switches them to https://."""
    if tls and url.startswith("http://"):
        return "https://" + url[len("http://"):]
    return url


@dataclass(frozen=True)
class SidecarConfig:
    pod_name: str
    ordinal: int
    naming: Naming
    engine: Engine
    backend: Backend
    workload_name: str
    listen_peer_url: str
    listen_client_url: str
    http_host: str
    http_port: int
    data_dir: str
    run_dir: str
    tls: TLSFiles | None
    heartbeat_interval: float  # the slow Lease refresh; changes are written at once
    poll_interval: float
    clean_interval: float
    clean_grace: float
    leave_timeout: float
    peer_status_timeout: float
    loop_stall: float
    options: Mapping[str, str] = field(default_factory=dict)
    listen_metrics_url: str = ""
    maintenance_interval: float = 10.0
    hash_check_interval: float = HASH_CHECK_DEFAULT_S  # 0: no periodic hash check
    defrag: maintenance.Policy = field(default_factory=maintenance.Policy)
    repair_automatic: bool = False  # spec.repair.policy Automatic
    crash_loop_restarts: int = 5
    log_level: str = "INFO"
    backup_interval: float = 10.0
    backup_mount_root: str = ""
    backup_mounts: str = ""  # raftset.backups.mounts of the destination this pod mounts
    scratch_dir: str = ""  # the store's scratch volume (engines.Scratch) as the sidecar sees it

    @property
    def namespace(self) -> str:
        return self.naming.namespace

    @property
    def cluster(self) -> str:
        return self.naming.cluster

    @property
    def peer_url(self) -> str:
        return self.naming.peer_url(self.ordinal)

    @property
    def client_url(self) -> str:
        return self.naming.client_url(self.ordinal)

    @property
    def cluster_token(self) -> str:
        return f"{self.cluster}.{self.namespace}"

    @property
    def lease_duration(self) -> int:
        """leaseDurationSeconds of every Lease the sidecar writes: three heartbeat refreshes."""
        return max(1, round(3 * self.heartbeat_interval))

    @property
    def marker_path(self) -> str:
        """Beside the data dir, in the same volume: survives with it, moves aside with it."""
        return f"{self.data_dir.rstrip('/')}.member.json"

    @property
    def startup_path(self) -> str:
        return self.engine.startup_path(self.run_dir)


def parse(argv: Sequence[str] | None, environ: Mapping[str, str]) -> SidecarConfig:
    parser = argparse.ArgumentParser(prog="raftset-sidecar", description=__doc__)
    for var, flag, help_text, _default in _VARS:
        parser.add_argument(flag, dest=var, help=f"{help_text} (env {var})")
    args = vars(parser.parse_args(argv))
    raw: dict[str, str] = {}
    for var, _flag, _help, default in _VARS:
        value = args.get(var)
        if value is None:
            value = environ.get(var, default)
        if value is None:
            raise SettingsError(f"{var} is required")
        raw[var] = value
    return from_values(raw)


def _seconds(raw: Mapping[str, str], var: str, *, allow_zero: bool = False) -> float:
    try:
        value = float(raw[var])
    except ValueError as exc:
        raise SettingsError(f"{var} must be a number of seconds, got {raw[var]!r}") from exc
    if value < 0 or (value == 0 and not allow_zero):
        raise SettingsError(f"{var} must be positive, got {raw[var]!r}")
    return value


def from_values(raw: Mapping[str, str]) -> SidecarConfig:
    pod = raw[SidecarEnv.POD_NAME]
    try:
        ordinal = contract.ordinal_of(pod)
    except ValueError as exc:
        raise SettingsError(f"{SidecarEnv.POD_NAME} {pod!r} has no ordinal suffix") from exc
    engine = engines.ENGINES.get(raw[SidecarEnv.ENGINE])
    if engine is None:
        raise SettingsError(f"{SidecarEnv.ENGINE} must be one of {sorted(engines.ENGINES)}, got {raw[SidecarEnv.ENGINE]!r}")
    backend = workloads.BACKENDS.get(raw[SidecarEnv.WORKLOAD_KIND])
    if backend is None:
        raise SettingsError(
            f"{SidecarEnv.WORKLOAD_KIND} must be one of {sorted(workloads.BACKENDS)}, got {raw[SidecarEnv.WORKLOAD_KIND]!r}"
        )
    try:
        options = json.loads(raw[SidecarEnv.OPTIONS] or "{}")
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{SidecarEnv.OPTIONS} is not JSON: {exc}") from exc
    if not isinstance(options, dict):
        raise SettingsError(f"{SidecarEnv.OPTIONS} must be a JSON object")
    refused = engine.refused_options(options)
    if refused:
        raise SettingsError(f"{SidecarEnv.OPTIONS} sets flags the sidecar owns: {', '.join(refused)}")
    host, _, port = raw[SidecarEnv.HTTP_ADDRESS].rpartition(":")
    if not host or not port.isdigit():
        raise SettingsError(f"{SidecarEnv.HTTP_ADDRESS} must be host:port, got {raw[SidecarEnv.HTTP_ADDRESS]!r}")
    tls_dir = raw[SidecarEnv.TLS_DIR].rstrip("/")
    tls = TLSFiles.under(tls_dir) if tls_dir else None
    cluster = raw[SidecarEnv.CLUSTER]
    naming = Naming(
        cluster=cluster,
        namespace=raw[SidecarEnv.NAMESPACE],
        peer_template=raw[SidecarEnv.PEER_URL_TEMPLATE],
        client_template=raw[SidecarEnv.CLIENT_URL_TEMPLATE],
        tls=tls is not None,
    )
    try:
        naming.peer_url(ordinal)
        naming.client_url(ordinal)
    except (KeyError, IndexError, ValueError) as exc:
        raise SettingsError(f"bad URL template: unknown field {exc}; use {', '.join(_TEMPLATE_FIELDS)}") from exc
    fields = {"pod": pod, "ordinal": ordinal, "cluster": cluster, "namespace": naming.namespace}
    return SidecarConfig(
        pod_name=pod,
        ordinal=ordinal,
        naming=naming,
        engine=engine,
        backend=backend,
        workload_name=raw[SidecarEnv.WORKLOAD_NAME] or cluster,
        listen_peer_url=with_scheme(raw[SidecarEnv.LISTEN_PEER_URL].format(**fields), tls is not None),
        listen_client_url=with_scheme(raw[SidecarEnv.LISTEN_CLIENT_URL].format(**fields), tls is not None),
        http_host=host,
        http_port=int(port),
        data_dir=raw[SidecarEnv.DATA_DIR],
        run_dir=raw[SidecarEnv.RUN_DIR],
        tls=tls,
        heartbeat_interval=_seconds(raw, SidecarEnv.HEARTBEAT_INTERVAL),
        poll_interval=_seconds(raw, SidecarEnv.POLL_INTERVAL),
        clean_interval=_seconds(raw, SidecarEnv.CLEAN_INTERVAL),
        clean_grace=_seconds(raw, SidecarEnv.CLEAN_GRACE, allow_zero=True),
        leave_timeout=_seconds(raw, SidecarEnv.LEAVE_TIMEOUT),
        peer_status_timeout=_seconds(raw, SidecarEnv.PEER_STATUS_TIMEOUT),
        loop_stall=_seconds(raw, SidecarEnv.LOOP_STALL),
        options={str(k): "" if v is None else str(v) for k, v in options.items()},
        log_level=raw[SidecarEnv.LOG_LEVEL].upper(),
        backup_interval=_seconds(raw, SidecarEnv.BACKUP_INTERVAL),
        backup_mount_root=raw[SidecarEnv.BACKUP_MOUNT_ROOT].rstrip("/"),
        backup_mounts=raw[SidecarEnv.BACKUP_MOUNTS],
        scratch_dir=raw[SidecarEnv.SCRATCH_DIR].rstrip("/") if engine.scratch else "",
        listen_metrics_url=raw[SidecarEnv.LISTEN_METRICS_URL].format(**fields),
        maintenance_interval=_seconds(raw, SidecarEnv.MAINTENANCE_INTERVAL),
        hash_check_interval=_seconds(raw, SidecarEnv.HASH_CHECK_INTERVAL, allow_zero=True),
        defrag=_defrag_policy(raw, engine),
        repair_automatic=_repair_policy(raw[SidecarEnv.REPAIR_POLICY]) == "Automatic",
        crash_loop_restarts=_count(raw, SidecarEnv.CRASH_LOOP_RESTARTS, minimum=1),
    )


def _defrag_policy(raw: Mapping[str, str], engine: Engine) -> maintenance.Policy:
    schedule = raw[SidecarEnv.DEFRAG_SCHEDULE].strip()
    problem = maintenance.schedule_error(schedule)
    if problem:
        raise SettingsError(f"{SidecarEnv.DEFRAG_SCHEDULE}: {problem}")
    numbers: dict[str, int] = {}
    for var in (SidecarEnv.DEFRAG_THRESHOLD_PERCENT, SidecarEnv.DEFRAG_MIN_BYTES):
        try:
            numbers[var] = int(raw[var])
        except ValueError as exc:
            raise SettingsError(f"{var} must be an integer, got {raw[var]!r}") from exc
    threshold = numbers[SidecarEnv.DEFRAG_THRESHOLD_PERCENT]
    if not 0 <= threshold <= 100:
        raise SettingsError(f"{SidecarEnv.DEFRAG_THRESHOLD_PERCENT} must be 0..100, got {threshold}")
    return maintenance.Policy(schedule=schedule, threshold_percent=threshold,
                              min_bytes=max(0, numbers[SidecarEnv.DEFRAG_MIN_BYTES]),
                              can_defragment=engine.capabilities.defragment)


def _repair_policy(value: str) -> str:
    if value not in REPAIR_POLICIES:
        raise SettingsError(f"{SidecarEnv.REPAIR_POLICY} must be one of {', '.join(REPAIR_POLICIES)}, got {value!r}")
    return value


def _count(raw: Mapping[str, str], key: str, *, minimum: int) -> int:
    try:
        value = int(raw[key])
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise SettingsError(f"{key} must be an integer >= {minimum}, got {raw[key]!r}")
    return value
