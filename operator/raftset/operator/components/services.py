"""The cluster's Services: the headless peer Service (every pod's stable DNS name), the client
Service and the headless metrics Service."""

from __future__ import annotations

from typing import Any

from raftset import contract
from raftset.operator.components.protocol import Applied, Manifest, Round
from raftset.operator.pure.objects import metadata
from raftset.operator.pure.spec import Cluster


def _service(cluster: Cluster, name: str, component: str, ports: dict[str, int],
             **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cluster, name, component),
        "spec": {
            **spec,
            "selector": contract.selector_labels(cluster.name),
            "ports": [{"name": port, "port": number, "targetPort": number} for port, number in ports.items()],
        },
    }



def peer_service(cluster: Cluster) -> dict[str, Any]:
    """Headless: every pod gets a stable DNS name, its peer URL."""
    return _service(cluster, contract.peer_service_name(cluster.name), "peer",
                    {"peer": contract.PEER_PORT, "client": contract.CLIENT_PORT},
                    clusterIP="None",
                    # Peers must resolve each other before they are ready, or no member ever is.
                    publishNotReadyAddresses=True)



def metrics_service(cluster: Cluster) -> dict[str, Any]:
    """Both /metrics of every member, the store's own and the sidecar's, for a ServiceMonitor.

    Headless and not waiting for readiness: a member that is not ready is what one wants to see.
    """
    service = _service(cluster, contract.metrics_service_name(cluster.name), "metrics",
                       {"metrics": contract.METRICS_PORT, "sidecar": contract.SIDECAR_PORT},
                       clusterIP="None", publishNotReadyAddresses=True)
    service["metadata"]["labels"][contract.LABEL_METRICS] = "true"
    return service



def client_service(cluster: Cluster) -> dict[str, Any]:
    return _service(cluster, contract.client_service_name(cluster.name), "client",
                    {"client": contract.CLIENT_PORT}, type="ClusterIP")



class Services(Applied):
    name = "services"

    def render(self, current: Round) -> list[Manifest]:
        return [peer_service(current.cluster), client_service(current.cluster), metrics_service(current.cluster)]
