"""`raftset-operator`: run the kopf operator for EtcdCluster and XlineCluster."""

from __future__ import annotations

import argparse
import logging

import kopf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="raftset-operator", description=__doc__)
    parser.add_argument("--namespace", action="append", default=[],
                        help="watch only this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                        help="kopf liveness endpoint URL")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from raftset.operator import handlers  # noqa: F401  (registers the handlers)

    kopf.run(
        standalone=True,  # one replica; see docs/operations.md on running a single operator
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )


if __name__ == "__main__":
    main()
