"""`raftset-operator`: run the kopf operator for EtcdCluster and XlineCluster."""

from __future__ import annotations

import argparse
import logging
import os
import socket

import kopf


def _identity() -> str:
    """The pod's name where the Deployment sets POD_NAME; else host and pid (tests, `make run`)."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="raftset-operator", description=__doc__)
    parser.add_argument("--namespace", action="append", default=[],
                        help="watch only this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                        help="kopf liveness endpoint URL")
    parser.add_argument("--leader-elect", action="store_true",
                        help="run only while holding the operator Lease (several replicas, one acts)")
    parser.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "raftset-system"),
                        help="namespace of the operator Lease (default: $POD_NAMESPACE)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        from raftset.operator import logs

        logging.getLogger("kopf.objects").addFilter(logs.DropRoutine())
    from raftset.operator import watches
    from raftset.operator.io import kube
    from raftset.operator import settings

    # Decided before the handlers register: only what the install enables and allows is watched.
    watches.decide(kube.load_config(), settings.from_env().backends, args.namespace)
    from raftset.operator import handlers  # noqa: F401  (registers the handlers)

    watches.outlive_deleted_crds()

    elector = None
    if args.leader_elect:
        from raftset.operator import election
        from raftset.operator.io import kube

        elector = election.Elector(kube.load_config(), args.lease_namespace, _identity(),
                                   election.Timing.from_env())
        with election.StandbyHealth(args.liveness):
            elector.acquire()

        def lost() -> None:
            # Not a graceful stop: a replica that may have lost the Lease must not take one more step.
            logging.getLogger("raftset.operator").critical("lost the operator Lease: exiting")
            os._exit(1)

        elector.keep(lost)
    try:
        kopf.run(
            # One acting replica: alone, or the holder of the operator Lease (docs/operations.md).
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
        )
    finally:
        if elector is not None:
            elector.release()


if __name__ == "__main__":
    main()
