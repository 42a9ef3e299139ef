"""Every rule docs/install.md ("What the CRDs refuse") names, checked as the docs state it,
against a real kube-apiserver with the committed CRDs (issue 14 item 6).

The unit tier checks the same rules with jsonschema and cel-python; this tier is the
apiserver's own verdict, including its CEL cost budget and its transition-rule semantics.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from raftset import contract, engines
from tests.harness.operator import Operator, api, wait_for
from tests.harness.objects import condition

pytestmark = pytest.mark.k8s

INSTALL_DOC = Path(__file__).resolve().parents[2] / "docs" / "install.md"
KINDS = {e.kind: e for e in engines.ENGINES.values()}


def body(kind: str, name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": contract.API_VERSION, "kind": kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 3, "tls": {"provider": "disabled"}, **spec}}


class Answer:
    """The apiserver's answer to one request: accepted, or refused with its message."""

    def __init__(self, error: ApiException | None = None) -> None:
        self.accepted = error is None
        self.message = "" if error is None else str(error.body)


def create(kubeconfig: str, obj: dict[str, Any]) -> Answer:
    custom = client.CustomObjectsApi(api(kubeconfig))
    try:
        custom.create_namespaced_custom_object(contract.GROUP, contract.VERSION, obj["metadata"]["namespace"],
                                               KINDS[obj["kind"]].plural, obj)
    except ApiException as error:
        return Answer(error)
    return Answer()


def patch(kubeconfig: str, namespace: str, name: str, ops: list[dict[str, Any]]) -> Answer:
    custom = client.CustomObjectsApi(api(kubeconfig))
    try:
        custom.patch_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", name, ops,
                                              _content_type="application/json-patch+json")
    except ApiException as error:
        return Answer(error)
    return Answer()


def refused(answer: Answer, *needles: str) -> None:
    assert not answer.accepted, "accepted"
    for needle in needles:
        assert needle in answer.message, answer.message


# (case, kind, metadata name, spec, what the message must say); the docs' wording in the id.
CREATES: list[tuple[str, str, str, dict[str, Any], tuple[str, ...]]] = [
    ("etcd flag the operator sets", "EtcdCluster", "f1", {"options": {"initial-cluster-state": "new"}},
     ("etcd flag 'initial-cluster-state' is set by the operator and cannot be given in options",)),
    ("etcd flag force-new-cluster", "EtcdCluster", "f2", {"options": {"force-new-cluster": ""}},
     ("'force-new-cluster' is set by the operator",)),
    ("xline flag the operator sets", "XlineCluster", "f3", {"options": {"members": "a=b"}},
     ("xline flag 'members' is set by the operator and cannot be given in options",)),
    ("option name with leading dashes", "EtcdCluster", "f4", {"options": {"--snapshot-count": "1"}},
     ("option names are flag names without leading dashes",)),
    ("ephemeral together with storageClassName", "EtcdCluster", "f5",
     {"storage": {"ephemeral": True, "storageClassName": "fast"}},
     ("storage.ephemeral and storage.storageClassName are mutually exclusive",)),
    ("issuerRef unless provider cert-manager", "XlineCluster", "f6",
     {"tls": {"provider": "auto", "issuerRef": {"name": "ca"}}},
     ("tls.issuerRef is only allowed with tls.provider cert-manager",)),
    ("name longer than 52 characters", "EtcdCluster", "n" * 53, {}, ("52",)),
    ("name that is not a DNS label", "EtcdCluster", "a.b", {}, ("DNS",)),
    ("enum", "EtcdCluster", "f7", {"tls": {"provider": "letsencrypt"}}, ("spec.tls.provider",)),
    ("range", "EtcdCluster", "f8", {"replicas": 0}, ("spec.replicas",)),
    ("quantity pattern", "EtcdCluster", "f9", {"storage": {"size": "lots"}}, ("spec.storage.size",)),
]


@pytest.mark.parametrize(("case", "kind", "name", "spec", "needles"), CREATES, ids=[c[0] for c in CREATES])
def test_create_is_refused_as_documented(kube_apiserver: Any, bare_operator: Operator, namespace: str, case: str,
                                         kind: str, name: str, spec: dict[str, Any], needles: tuple[str, ...]) -> None:
    refused(create(kube_apiserver.kubeconfig, body(kind, name, namespace, **spec)), *needles)


def test_every_owned_flag_is_refused_by_name(kube_apiserver: Any, bare_operator: Operator, namespace: str) -> None:
    """'one message per flag, naming it': every flag of both engines, one create each."""
    for kind, engine in KINDS.items():
        for flag in sorted(engine.owned_flags):
            refused(create(kube_apiserver.kubeconfig, body(kind, "owned", namespace, options={flag: "x"})),
                    f"{engine.name} flag '{flag}' is set by the operator")


def test_the_longest_allowed_name_is_accepted(kube_apiserver: Any, bare_operator: Operator, namespace: str) -> None:
    assert create(kube_apiserver.kubeconfig, body("EtcdCluster", "n" * 52, namespace,
                                                  workloadKind="StatefulSet")).accepted


# (case, spec at create, JSON patch of the update, the message, or None when accepted)
UPDATES: list[tuple[str, dict[str, Any], list[dict[str, Any]], str | None]] = [
    ("workloadKind changed", {"workloadKind": "StatefulSet"},
     [{"op": "replace", "path": "/spec/workloadKind", "value": "AdvancedStatefulSet"}], "spec.workloadKind is immutable"),
    ("workloadKind unset", {"workloadKind": "StatefulSet"},
     [{"op": "remove", "path": "/spec/workloadKind"}], "spec.workloadKind is immutable"),
    ("storageClassName set where none was", {},
     [{"op": "add", "path": "/spec/storage/storageClassName", "value": "fast"}],
     "spec.storage.storageClassName is immutable"),
    ("storageClassName changed", {"storage": {"storageClassName": "fast"}},
     [{"op": "replace", "path": "/spec/storage/storageClassName", "value": "slow"}],
     "spec.storage.storageClassName is immutable"),
    ("storageClassName removed", {"storage": {"storageClassName": "fast"}},
     [{"op": "remove", "path": "/spec/storage/storageClassName"}], "spec.storage.storageClassName is immutable"),
    ("storageClassName kept while the size grows", {"storage": {"storageClassName": "fast"}},
     [{"op": "add", "path": "/spec/storage/size", "value": "2Gi"}], None),
    ("ephemeral turned on", {},
     [{"op": "add", "path": "/spec/storage/ephemeral", "value": True}], "spec.storage.ephemeral is immutable"),
    ("ephemeral turned off", {"storage": {"ephemeral": True}},
     [{"op": "replace", "path": "/spec/storage/ephemeral", "value": False}], "spec.storage.ephemeral is immutable"),
    ("tls provider changed", {},
     [{"op": "replace", "path": "/spec/tls/provider", "value": "auto"}], "spec.tls.provider is immutable"),
    ("replicas changed", {}, [{"op": "replace", "path": "/spec/replicas", "value": 5}], None),
]


@pytest.mark.parametrize(("case", "spec", "ops", "message"), UPDATES, ids=[u[0] for u in UPDATES])
def test_update_is_refused_as_documented(kube_apiserver: Any, bare_operator: Operator, namespace: str, case: str,
                                         spec: dict[str, Any], ops: list[dict[str, Any]],
                                         message: str | None) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    name = re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")[:40]
    assert create(kubeconfig, body("EtcdCluster", name, namespace, **spec)).accepted
    answer = patch(kubeconfig, namespace, name, ops)
    if message is None:
        assert answer.accepted, answer.message
    else:
        refused(answer, message)


def test_workload_kind_set_later_only_to_the_kind_already_running(kube_apiserver: Any, bare_operator: Operator,
                                                                 namespace: str) -> None:
    """'it may be set once when it was unset, and then only to the kind already running'
    (status.workloadKind, which the operator records when it renders the workload)."""
    kubeconfig = kube_apiserver.kubeconfig
    assert create(kubeconfig, body("EtcdCluster", "later", namespace)).accepted
    custom = client.CustomObjectsApi(api(kubeconfig))

    def obj() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(contract.GROUP, contract.VERSION, namespace, "etcdclusters", "later")

    wait_for(lambda: (obj().get("status") or {}).get("workloadKind") == "StatefulSet", 30, "the default kind rendered")
    set_to = [{"op": "add", "path": "/spec/workloadKind", "value": "AdvancedStatefulSet"}]
    refused(patch(kubeconfig, namespace, "later", set_to), "spec.workloadKind must be the workload kind the cluster "
                                                            "already runs on")
    set_to[0]["value"] = "StatefulSet"
    assert patch(kubeconfig, namespace, "later", set_to).accepted
    assert obj()["spec"]["workloadKind"] == "StatefulSet"
    assert condition(obj(), "Degraded").get("status") != "True"


def test_the_docs_name_exactly_these_rules() -> None:
    """If install.md names a rule, a case above checks it; the wording is the test's anchor."""
    section = INSTALL_DOC.read_text().split("## What the CRDs refuse", 1)[1].split("\n## ", 1)[0]
    for phrase in ("spec.options", "leading dashes", "storage.ephemeral", "storage.storageClassName",
                   "tls.issuerRef", "52 characters", "DNS labels", "spec.workloadKind",
                   "spec.storage.storageClassName", "spec.storage.ephemeral", "spec.tls.provider"):
        assert phrase in section, phrase
