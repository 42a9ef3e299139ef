"""Fixtures of the k8s tier: labs whose sidecars authenticate as the member ServiceAccount, a
namespace per test. The operator without workload controllers (`bare_operator`) is in
tests/conftest.py, beside the e2e tier's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.aio.client
import kubernetes.aio.config
import pytest

from raftset import contract
from raftset.operator.io import kube
from raftset.operator.components.member_rbac import member_rbac
from raftset.operator.pure.objects import member_service_account
from raftset.operator.pure import spec
from tests.harness.lab import Lab
from tests.harness.engines import EngineUnderTest
from tests.harness.operator import kubectl


def member_kubeconfig(plane: Any, lab: Lab) -> str:
    """A kubeconfig of the cluster's member ServiceAccount, bound to the operator's member Role."""
    body = {"apiVersion": contract.API_VERSION, "kind": contract.KIND_ETCD,
            "metadata": {"name": lab.cluster, "namespace": lab.namespace, "uid": "00000000-test"}, "spec": {}}
    cluster = spec.parse(body, default_workload_kind="StatefulSet")
    objects = member_rbac(cluster)
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)
    plane.apply(objects)
    return plane.token_kubeconfig(lab.namespace, member_service_account(cluster),
                                  lab.workdir / "member.kubeconfig")


@pytest.fixture
def lab(kube_apiserver: Any, engine_ready: EngineUnderTest, tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """Labs on the build under test (the test id names it, tests/conftest.py)."""
    labs: list[Lab] = []

    def make(**kwargs: Any) -> Lab:
        made = Lab(kube_apiserver.kubeconfig, tmp_path / f"lab{len(labs)}", engine=engine_ready, **kwargs)
        made.workdir.mkdir(parents=True, exist_ok=True)
        made.env_extra["KUBECONFIG"] = member_kubeconfig(kube_apiserver, made)
        labs.append(made)
        return made

    yield make
    for made in labs:
        made.close()


@pytest.fixture
async def operator_session(kube_apiserver: Any) -> AsyncIterator[kube.KubeClient]:
    """The operator's own client session (raftset.operator.io.kube), straight to the apiserver."""
    configuration = kubernetes.aio.client.Configuration()
    await kubernetes.aio.config.load_kube_config(kube_apiserver.kubeconfig, client_configuration=configuration)
    session = await kube.session(configuration)
    try:
        yield session
    finally:
        await session.close()


@pytest.fixture
def namespace(kube_apiserver: Any) -> str:
    name = f"k-{uuid.uuid4().hex[:8]}"
    kubectl(kube_apiserver.kubeconfig, "create", "namespace", name)
    return name
