"""`kubectl raftset VERB ...`: the command line (argparse), its exit codes and its errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException

from raftset.plugin import verbs
from raftset.plugin.kube import Api, NotFound, UsageError

EXIT_CODES = """exit codes:
  0  done: the verb succeeded (status, why: the cluster is Available and not Degraded)
  1  failed: refused by the operator, a failed backup or restore, declined, an API or kubeconfig error
  2  usage: bad arguments, or a name both kinds have (say --kind)
  3  not found or not ready: no such cluster or pod, nothing to act on (no spec.backup),
     or (status, why) the cluster is not Available or is Degraded
  4  timed out: the operator still works on it (see `kubectl raftset why NAME`)"""

Verb = Callable[[Api, argparse.Namespace, verbs.Out], int]


def _common(parser: argparse.ArgumentParser, *, inherited: bool) -> None:
    """kubectl's own options, accepted before and after the verb (after it, they override)."""
    default = argparse.SUPPRESS if inherited else None
    parser.add_argument("-n", "--namespace", default=default, help="the namespace (default: the context's)")
    parser.add_argument("--kubeconfig", default=default, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", default=default, help="kubeconfig context")
    parser.add_argument("--kind", default=default,
                        help="EtcdCluster (etcdc) or XlineCluster (xc); default: whichever has the name")
    parser.add_argument("-o", "--output", choices=("text", "json"), default=argparse.SUPPRESS if inherited else "text",
                        help="text for people, json for scripts")


def _follow(parser: argparse.ArgumentParser, timeout: float) -> None:
    parser.add_argument("--timeout", type=float, default=timeout, help=f"seconds to follow (default {timeout:.0f})")
    parser.add_argument("--no-wait", action="store_true", help="only write the request, do not follow it")


def _verb(sub: argparse._SubParsersAction, name: str, fn: Verb, summary: str, example: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=summary, description=summary, formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog=f"example:\n  {example}\n\n{EXIT_CODES}")
    _common(parser, inherited=True)
    parser.set_defaults(verb=fn)
    return parser


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl raftset", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Day-2 verbs for raftset's EtcdCluster and XlineCluster: each writes the annotation the "
                    "operator documents, then follows what the operator publishes.",
        epilog=f"example:\n  kubectl raftset status orders -n shop\n\n{EXIT_CODES}")
    _common(top, inherited=False)
    sub = top.add_subparsers(dest="command", required=True, metavar="VERB")

    p = _verb(sub, "status", verbs.status, "members, conditions and what the operator is doing now",
              "kubectl raftset status orders -o json | jq '.members[] | select(.healthy | not)'")
    p.add_argument("name", metavar="NAME")

    p = _verb(sub, "why", verbs.why, "the diagnosis, conditions and recent Events in plain words",
              "kubectl raftset why orders --events 30")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--events", type=int, default=15, help="how many recent Events to show (default 15)")

    p = _verb(sub, "replace", verbs.replace,
              "replace a member (raftset.dev/replace=true on its pod), then follow its steps",
              "kubectl raftset replace orders-1 --timeout 900")
    p.add_argument("pod", metavar="POD")
    _follow(p, 600)

    p = _verb(sub, "recover-quorum", verbs.recover_quorum,
              "after a quorum loss: show the survivors ranked, then ask the operator to recover "
              "(raftset.dev/recover-quorum)", "kubectl raftset recover-quorum orders --from orders-2 --yes")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--from", dest="from_pod", metavar="POD", help="the survivor to start from (default: auto)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation (scripts)")
    _follow(p, 600)

    p = _verb(sub, "backup", verbs.backup, "take a backup now (raftset.dev/backup-now) and wait for its result",
              "kubectl raftset backup orders && kubectl raftset backups orders")
    p.add_argument("name", metavar="NAME")
    _follow(p, 300)

    p = _verb(sub, "backups", verbs.backup_list, "list the published backups in the cluster's S3 bucket (manifests)",
              "kubectl raftset backups orders -o json | jq -r '.backups[0].key'")
    p.add_argument("name", metavar="NAME")

    p = _verb(sub, "restore", verbs.restore,
              "create a NEW cluster from a backup of NAME (spec.bootstrap.fromBackup) and wait until it is Available",
              "kubectl raftset restore orders --from latest --as orders-restored")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--from", dest="from_key", required=True, metavar="KEY",
                   help="`latest`, or a snapshot key as `kubectl raftset backups NAME` lists it")
    p.add_argument("--as", dest="new_name", required=True, metavar="NEW", help="the new cluster's name")
    p.add_argument("--replicas", type=int, help="the new cluster's size (default: NAME's)")
    _follow(p, 600)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = verbs.Out(json=args.output == "json")
    try:
        api = Api.connect(args.kubeconfig, args.context, args.namespace)
        return int(args.verb(api, args, out))
    except NotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return verbs.NOT_READY
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return verbs.USAGE
    except (FileExistsError, ConfigException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return verbs.FAILED
    except ApiException as exc:
        print(f"error: the API answered {exc.status} {exc.reason}: {exc.body}", file=sys.stderr)
        return verbs.FAILED
    except KeyboardInterrupt:
        return 130
