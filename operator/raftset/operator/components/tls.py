"""The TLS providers' writes: read the Secrets / Certificates, call the pure core, apply.

Runs before the owned objects are applied, so a pod never starts on Secrets that are
not there yet (`auto`) and the workload carries the revision of the certificates it
must run (see `contract.ANNOTATION_TLS_REVISION`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from raftset import contract
from raftset.workloads import being_deleted
from raftset.operator.pure import certmanager
from raftset.operator.pure import rotation
from raftset.operator.pure import certificates
from raftset.operator.pure.certificates import KeyPair, StoredLeaf
from raftset.operator.pure.objects import metadata
from raftset.operator.components.protocol import Owned, Round
from raftset.operator.io.api import KubeAPI
from raftset.operator.pure.spec import Cluster

Problem = tuple[str, str]

# The ClusterRole that grants the operator Secrets, bound per namespace (docs/security.md).
SECRETS_ROLE = "raftset-operator-secrets"


def secrets_forbidden(namespace: str) -> Problem:
    """The Degraded reason and message when the operator may not touch Secrets in `namespace`."""
    return ("SecretsForbidden",
            f"spec.tls.provider auto keeps its CA and certificates in Secrets, and the operator may not "
            f"read or write Secrets in namespace {namespace}: bind the ClusterRole {SECRETS_ROLE} there "
            f"(kubectl create rolebinding {SECRETS_ROLE} -n {namespace} --clusterrole={SECRETS_ROLE} "
            f"--serviceaccount=<operator namespace>:raftset-operator), or use provider cert-manager")



@dataclass(frozen=True)
class TLSState:
    """What the reconcile needs from the TLS provider."""

    revision: str | None = None  # for the pod template; None when nothing was written
    problem: Problem | None = None  # a Degraded reason and message


def running_revision(workload: Mapping[str, Any] | None) -> str | None:
    """The TLS revision the live workload's pods run."""
    template = ((workload or {}).get("spec") or {}).get("template") or {}
    return ((template.get("metadata") or {}).get("annotations") or {}).get(contract.ANNOTATION_TLS_REVISION)


@dataclass(frozen=True)
class Provider:
    """One value of spec.tls.provider: what it needs from the cluster and how it writes.

    Chosen by name from PROVIDERS (etcd-io/etcd-operator's certificate providers are the
    model), so that a new provider is a new entry, not another branch.
    """

    name: str
    # Called with `write`: makes the material current and returns its revision (the live
    # workload tells whether the pods run the last one).
    ensure: Callable[[KubeAPI, Cluster, datetime, Mapping[str, Any] | None], Awaitable[str]] | None
    # An API the provider cannot work without, and the Degraded reason/message when absent.
    requires: tuple[str, str] | None = None
    missing: Problem | None = None
    # The Degraded reason/message, by namespace, when the API refuses (403) what it reads or writes.
    forbidden: Callable[[str], Problem] | None = None


async def ensure_tls(kube: KubeAPI, cluster: Cluster, now: datetime, *,
                     workload: Mapping[str, Any] | None = None, write: bool = True) -> TLSState:
    """Check the provider can work; with `write`, make sure the material exists and is current.

    Without `write` (a reconcile tick that applies nothing) only the cheap check runs, so
    a missing cert-manager is reported on every tick instead of flapping. When the
    provider cannot work, the pods keep the revision they run (`workload`): no roll.
    """
    provider = PROVIDERS[cluster.tls_provider]
    if provider.ensure is None:
        return TLSState()  # the Encrypted condition carries the warning (status.encryption)
    if provider.requires is not None and not await kube.has_api(*provider.requires):
        return TLSState(revision=running_revision(workload), problem=provider.missing)
    if not write:
        return TLSState()
    try:
        return TLSState(revision=await provider.ensure(kube, cluster, now, workload))
    except ApiException as error:
        if error.status != 403 or provider.forbidden is None:
            raise
        return TLSState(revision=running_revision(workload), problem=provider.forbidden(cluster.namespace))


async def _ensure_cert_manager(kube: KubeAPI, cluster: Cluster, now: datetime,
                               _workload: Mapping[str, Any] | None) -> str:
    for manifest in certmanager.objects(cluster):
        await kube.apply(manifest)
    found = {}
    for purpose in certificates.PURPOSES:
        found[purpose] = await kube.get(certmanager.API_VERSION, "Certificate", cluster.namespace,
                                        certificates.secret_name(cluster.name, purpose))
    return certmanager.revision(found)


def _secret(cluster: Cluster, name: str, pair: KeyPair, ca_pem: bytes,
            revision: int | None) -> dict[str, Any]:
    meta = metadata(cluster, name, "tls")
    if revision is not None:
        meta["annotations"] = {contract.ANNOTATION_TLS_REVISION: str(revision)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta,
            "data": certificates.secret_data(pair, ca_pem)}


def rolled(cluster: Cluster, workload: Mapping[str, Any] | None, revision: str,
           pods: Sequence[Mapping[str, Any]]) -> bool:
    """Do all the workload's pods run TLS revision `revision`, ready? (True before any pod exists.)

    The workload's counts trail its pods: its controller writes them after it saw a pod go, and a
    round woken by the operator's own deletion reads them at once. So every ordinal the workload
    keeps must also show, in `pods` (the member pods read at this moment), a pod that is not
    terminating, is Ready, and carries `revision` (from the template it was created from)."""
    if workload is None:
        return True
    if running_revision(workload) != revision:
        return False
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    replicas = int((workload.get("spec") or {}).get("replicas") or 0)
    if int(status.get("updatedReplicas") or 0) < replicas or int(status.get("readyReplicas") or 0) < replicas:
        return False
    running = {contract.member_ordinal(cluster.name, str((pod.get("metadata") or {}).get("name", ""))): pod
               for pod in pods if _runs(pod, revision)}
    return all(ordinal in running for ordinal in cluster.backend.kept(workload))


def _runs(pod: Mapping[str, Any], revision: str) -> bool:
    """Is `pod` Ready, not terminating, and created from a template of TLS `revision`?"""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    return (not being_deleted(pod) and annotations.get(contract.ANNOTATION_TLS_REVISION) == revision
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions))


async def _ensure_auto(kube: KubeAPI, cluster: Cluster, now: datetime, workload: Mapping[str, Any] | None) -> str:
    ns = cluster.namespace
    ca_name = certificates.ca_secret_name(cluster.name)
    stored_ca = certificates.read_secret(await kube.get("v1", "Secret", ns, ca_name))
    ca = stored_ca[0] if stored_ca else None
    leaves: dict[str, StoredLeaf | None] = {}
    for purpose in certificates.PURPOSES:
        found = certificates.read_secret(
            await kube.get("v1", "Secret", ns, certificates.secret_name(cluster.name, purpose)))
        leaves[purpose] = StoredLeaf(*found) if found else None
    specs = certificates.leaf_specs(cluster.name, ns, cluster.replicas)
    issuance = certificates.issuance(ca, leaves, specs, now)
    if issuance.new_ca or ca is None:
        ca = certificates.build_ca(f"{cluster.name}-ca", now)
        await kube.apply(_secret(cluster, ca_name, ca, ca.cert_pem, None))
        issuance = certificates.issuance(ca, leaves, specs, now)
    # A CA change (or one under way) goes through the phases of rotation.py, never at once.
    current = str(max((leaf.revision for leaf in leaves.values() if leaf), default=0))
    phase = rotation.next_phase(ca.cert_pem, leaves, rolled=False)
    if phase is not None and phase.phase == rotation.WAIT:
        # Only a phase that waits for the roll needs the pods, read now (see `rolled`).
        pods = await kube.list("v1", "Pod", ns, contract.label_selector(cluster.name))
        phase = rotation.next_phase(ca.cert_pem, leaves, rolled(cluster, workload, current, pods))
    if phase is not None:
        for purpose, (reissue, ca_bundle) in phase.writes.items():
            held = leaves[purpose]
            assert held is not None  # rotation.next_phase works only on a complete set
            pair = certificates.issue(ca, specs[purpose], now) if reissue else held.pair
            await kube.apply(_secret(cluster, certificates.secret_name(cluster.name, purpose), pair,
                                     ca_bundle, phase.revision))
        return str(phase.revision)
    for purpose in issuance.reissue:
        pair = certificates.issue(ca, specs[purpose], now)
        await kube.apply(_secret(cluster, certificates.secret_name(cluster.name, purpose), pair,
                                 ca.cert_pem, issuance.revision))
    return str(issuance.revision)


PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    Provider("auto", ensure=_ensure_auto, forbidden=secrets_forbidden),
    Provider("cert-manager", ensure=_ensure_cert_manager,
             requires=(certmanager.API_VERSION, "Certificate"),
             missing=("CertManagerMissing",
                      "spec.tls.provider cert-manager needs cert-manager (certificates.cert-manager.io/v1), "
                      "which this cluster does not serve: install cert-manager or use provider auto")),
    Provider("disabled", ensure=None),
)}


class TLSMaterial(Owned):
    """First: pods must find their Secrets, and the workload carries the revision they run."""

    name = "tls"

    async def sync(self, kube: KubeAPI, current: Round) -> Round:
        state = await ensure_tls(kube, current.cluster, current.now, workload=current.workload, write=current.write)
        return current.found(state.problem, tls_revision=state.revision)
