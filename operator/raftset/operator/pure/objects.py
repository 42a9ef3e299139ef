"""What every object the operator owns carries: labels, metadata with the owner reference; and how a
watch event of one is read (someone else's edit) and kept in an index."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NamedTuple

from raftset import contract
from raftset.operator.pure.spec import Cluster


class Incarnation(NamedTuple):
    """One pod as a destructive step judged it: deleted only while its UID is still this one, so a
    pod re-created under the same name after the judgement is never the one deleted."""

    name: str
    uid: str


def labels(cluster: Cluster, component: str) -> dict[str, str]:
    return {
        **contract.selector_labels(cluster.name),
        contract.LABEL_COMPONENT: component,
        contract.LABEL_MANAGED_BY: contract.MANAGER,
        contract.LABEL_PART_OF: contract.MANAGER,
        contract.LABEL_CLUSTER: cluster.name,
        contract.LABEL_ENGINE: cluster.engine.name,
    }


def metadata(cluster: Cluster, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": cluster.namespace,
        "labels": labels(cluster, component),
        "ownerReferences": [cluster.owner_reference],
    }


def member_service_account(cluster: Cluster) -> str:
    return f"{cluster.name}-member"


def edited_behind_our_back(event_type: str | None, obj: Mapping[str, Any]) -> bool:
    """Does this watch event of an owned object mean someone else changed it?

    A spec edit bumps generation ahead of the controller's observedGeneration; status
    churn does not. A Service has no generation and no controller writing it: any
    change to it is someone's edit.
    """
    if event_type == "DELETED":
        return True
    if event_type != "MODIFIED":
        return False
    generation = (obj.get("metadata") or {}).get("generation")
    return generation is None or generation != (obj.get("status") or {}).get("observedGeneration")


def cached(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A private copy of an owned object for an index, without `metadata.managedFields`: nothing
    here reads them, and they repeat the path of every field, for each of its writers."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return copy.deepcopy({**obj, "metadata": meta})

