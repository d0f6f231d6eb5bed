"""kubectl tandem: why a Pod is (not) running, in one command.

    kubectl tandem get [-n NS | -A]     Tandem's Pods: group, Slurm job, the Kueue Workload that
                                        admitted it (if any), state, reason, queue position,
                                        Slurm node, Node, lock, age
    kubectl tandem describe POD [-n NS] the whole story of one Pod (also: pod POD, pod/POD)
    kubectl tandem describe node NODE   the whole story of one Node (also: node/NODE, or its Slurm
                                        node's name): Slurm state and reason, lock, each job and
                                        its GPUs, each Pod, each GPU's health
    kubectl tandem nodes [-o wide]      Node <-> Slurm node, Slurm state, lock, how many jobs and
                                        Pods, GPUs used of total, GPU health; -o wide adds the
                                        reason, the job ids, each job's GPUs, the unhealthy GPUs
                                        and the Pods' names
    kubectl tandem topology             Slurm's topology as the syncer wrote it from Node labels,
                                        each domain's free and busy nodes

Only the kubeconfig is needed; --syncer-address adds Slurm's own view (job and node states), and
--scheduler-address adds to `describe POD` what the scheduler says of the Pod: its placement state
(PENDING, STARTED, BOUND, INVALID, TERMINATING), Slurm job, Slurm node and reason. Both services
answer only an operator's certificate (--grpc-ca, --grpc-cert, --grpc-key).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

import httpx
from kubernetes import config as k8s_config

from tandem.cli import facts as f
from tandem.cli import output, placement, views
from tandem.kube import KubeClient, KubeError
from tandem.mtls import TlsFiles


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubectl tandem", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    p.add_argument("--syncer-address", default=os.environ.get("TANDEM_SYNCER_ADDRESS", ""), help="host:port")
    p.add_argument(
        "--syncer-server-name",
        default=os.environ.get("TANDEM_SYNCER_SERVER_NAME", ""),
        help="the name the syncer's certificate carries, when --syncer-address is not it (a port-forward, "
        "a ClusterIP): <fullname>-syncer.<namespace>.svc (env TANDEM_SYNCER_SERVER_NAME)",
    )
    p.add_argument(
        "--scheduler-address",
        default=os.environ.get("TANDEM_SCHEDULER_ADDRESS", ""),
        help="host:port: `describe POD` adds where the scheduler placed the Pod "
        "(env TANDEM_SCHEDULER_ADDRESS)",
    )
    p.add_argument(
        "--scheduler-server-name",
        default=os.environ.get("TANDEM_SCHEDULER_SERVER_NAME", ""),
        help="the name the scheduler's certificate carries, when --scheduler-address is not it: "
        "<fullname>-scheduler.<namespace>.svc (env TANDEM_SCHEDULER_SERVER_NAME)",
    )
    # The syncer and the scheduler serve only certified callers: an operator's certificate from
    # Tandem's CA.
    for name, what in (("ca", "CA certificate"), ("cert", "operator certificate"), ("key", "its key")):
        env = f"TANDEM_GRPC_{name.upper()}"
        p.add_argument(f"--grpc-{name}", default=os.environ.get(env, ""), help=f"{what} (PEM; env {env})")
    p.add_argument(
        "--scheduler-name", default="", help="also list this scheduler's Pods Tandem has not marked yet"
    )
    p.add_argument(
        "--slurmd-namespace",
        default=os.environ.get("TANDEM_SLURMD_NAMESPACE", f.DEFAULT_SLURMD_NAMESPACE),
        help="namespace of the slurmd Pods, as the services are told (env TANDEM_SLURMD_NAMESPACE)",
    )
    output_help = "wide: `nodes` adds the reason and the lists (job ids, each job's GPUs, Pods)"
    p.add_argument("-o", "--output", choices=output.FORMATS, default="table", help=output_help)
    sub = p.add_subparsers(dest="command", required=True)
    get = sub.add_parser("get", help="Tandem's Pods")
    get.add_argument("-n", "--namespace", default=None)
    get.add_argument("-A", "--all-namespaces", action="store_true")
    describe = sub.add_parser("describe", help="one Pod's or one Node's whole story")
    describe.add_argument(
        "what", metavar="POD|TYPE", help="a Pod's name, or the type (pod, node) of NAME, or TYPE/NAME"
    )
    describe.add_argument("name", metavar="NAME", nargs="?", help="with a TYPE: the Pod's or Node's name")
    describe.add_argument("-n", "--namespace", default=None, help="the Pod's namespace")
    describe.add_argument(
        "--topology-configmap",
        default=os.environ.get("TANDEM_TOPOLOGY_CONFIGMAP", f.DEFAULT_TOPOLOGY_CONFIGMAP),
        help="namespace/name of the ConfigMap the syncer publishes Slurm's topology in",
    )
    nodes = sub.add_parser("nodes", help="Nodes and their Slurm nodes")
    topo = sub.add_parser("topology", help="Slurm's topology from Node labels, free and busy nodes")
    topo.add_argument(
        "--configmap",
        default=os.environ.get("TANDEM_TOPOLOGY_CONFIGMAP", f.DEFAULT_TOPOLOGY_CONFIGMAP),
        help="namespace/name of the ConfigMap the syncer publishes it in (env TANDEM_TOPOLOGY_CONFIGMAP)",
    )
    # kubectl's users put flags after the subcommand too.
    for child in (get, describe, nodes, topo):
        child.add_argument(
            "-o", "--output", choices=output.FORMATS, default=argparse.SUPPRESS, help=output_help
        )
    return p


POD_TYPE = frozenset({"pod", "pods", "po"})
NODE_TYPE = frozenset({"node", "nodes", "no"})


class UsageError(ValueError):
    """The command names nothing Tandem can show; the message says what it can."""


def describe_target(what: str, name: str | None) -> tuple[str, str]:
    """("pod" or "node", its name) from `describe`'s words, as kubectl reads them: `NAME` (a Pod:
    Tandem's own subject), `TYPE NAME` or `TYPE/NAME`."""
    if name is None:
        kind, slash, name = what.partition("/")
        if not slash:
            return "pod", what
        what = kind
    kind = "pod" if what.lower() in POD_TYPE else "node" if what.lower() in NODE_TYPE else ""
    if not kind:
        raise UsageError(f'cannot describe "{what}": a pod (POD, pod POD, pod/POD) or a node (node NODE)')
    if not name:
        raise UsageError(f"describe {what}: which one? (a name after the type)")
    return kind, name


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "describe":
            describe_target(args.what, args.name)  # a wrong type is told before the cluster is asked
        kube, default_ns = _client(args.kubeconfig, args.context)
        print(run(args, kube, default_ns))
        return 0
    except (f.Unreachable, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
    except KubeError as e:
        if e.status == 0:  # no answer at all (tandem.kube's connection errors)
            print(f"error: cannot reach the Kubernetes API: {e.message}", file=sys.stderr)
        else:
            print(f"error: the Kubernetes API refused: {e}", file=sys.stderr)
    except httpx.HTTPError as e:
        print(f"error: cannot reach the Kubernetes API: {type(e).__name__}: {e}", file=sys.stderr)
    except k8s_config.ConfigException as e:
        print(f"error: no usable kubeconfig: {e}", file=sys.stderr)
    return 1


def _grpc_tls(args: argparse.Namespace) -> TlsFiles | None:
    if not (args.grpc_ca or args.grpc_cert or args.grpc_key):
        return None
    return TlsFiles(args.grpc_ca, args.grpc_cert, args.grpc_key)


def _gather(args: argparse.Namespace, kube: KubeClient, namespace: str | None) -> f.Facts:
    return f.gather(
        kube,
        namespace,
        args.scheduler_name,
        args.syncer_address,
        _grpc_tls(args),
        args.slurmd_namespace,
        args.syncer_server_name,
    )


def run(args: argparse.Namespace, kube: KubeClient, default_ns: str) -> str:
    now = dt.datetime.now(dt.UTC)
    if args.command == "get":
        namespace = None if args.all_namespaces else (args.namespace or default_ns)
        facts = _gather(args, kube, namespace)
        rows = views.pod_rows(facts, now)
        if args.output not in output.TABLES:
            return output.structured(rows, args.output)
        columns = views.pod_columns(rows, all_namespaces=namespace is None)
        if not rows:
            where = "any namespace" if namespace is None else f"namespace {namespace}"
            return f"No Tandem Pods found in {where}."
        return output.table(columns, rows)
    if args.command == "topology":
        facts = _gather(args, kube, None)
        published = f.topology_of(kube, args.configmap)
        if published is None:
            why = "is the syncer's --topology-levels empty?"
            return f"No topology published in ConfigMap {args.configmap} ({why})."
        rows = views.topology_rows(facts, published)
        if args.output not in output.TABLES:
            return output.structured(rows, args.output)
        notes = views.missing_labels(facts, published)
        return "\n".join([output.table(views.TOPOLOGY_COLUMNS, rows), *(["", *notes] if notes else [])])
    if args.command == "nodes":
        facts = _gather(args, kube, None)
        if args.output not in output.TABLES:
            return output.structured(views.node_records(facts, now), args.output)
        wide = args.output == "wide"
        rows = views.node_rows(facts, now, wide)
        return output.table(views.NODE_WIDE_COLUMNS if wide else views.NODE_COLUMNS, rows)
    kind, name = describe_target(args.what, args.name)
    if kind == "node":
        return _describe_node(args, kube, name, now)
    namespace = args.namespace or default_ns
    try:
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except KubeError as e:
        if e.not_found:
            raise f.Unreachable(f'pod "{name}" not found in namespace {namespace}') from e
        raise
    facts = _gather(args, kube, namespace)
    job = views.job_id(pod)
    status = facts.slurm.jobs.get(job) if facts.slurm is not None and job is not None else None
    slurm_nodes = views.group_slurm_nodes(facts, pod, status)
    facts.pods = [pod]
    node = views.node_of(pod)
    node_events = views.lock_events(f.events_of(kube, "Node", node, None)) if node else []
    group = str(((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or "")
    asked = views.asked_topology(pod, f.podgroup_topology(kube, namespace, group) if group else ())
    domain = views.topology_section(
        asked, f.topology_of(kube, args.topology_configmap) if asked else None, slurm_nodes
    )
    events = f.events_of(kube, "Pod", name, namespace)
    placed = _placement(args, namespace, name)
    story = views.describe(facts, pod, events, node_events, now, domain, placed)
    return output.story(story) if args.output in output.TABLES else output.structured(story, args.output)


def _placement(args: argparse.Namespace, namespace: str, name: str) -> dict[str, str] | str | None:
    """What the scheduler says of the Pod; None when not asked (no --scheduler-address)."""
    if not args.scheduler_address:
        return None
    return placement.describe_placement(
        args.scheduler_address, _grpc_tls(args), namespace, name, args.scheduler_server_name
    )


def _describe_node(args: argparse.Namespace, kube: KubeClient, name: str, now: dt.datetime) -> str:
    facts = _gather(args, kube, None)
    node = views.find_node(facts, name)
    if node is None:
        raise f.Unreachable(f'node "{name}" not found (neither a Node nor a Slurm node a slurmd Pod runs)')
    events = views.lock_events(f.events_of(kube, "Node", node, None))
    story = views.describe_node(facts, node, events, now)
    return output.story(story) if args.output in output.TABLES else output.structured(story, args.output)


def _client(path: str, context: str | None) -> tuple[KubeClient, str]:
    """The API client and the context's namespace, from a kubeconfig as kubectl finds it."""
    found = path or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube/config")
    if not Path(found).exists():
        raise k8s_config.ConfigException(f"{found} does not exist (set --kubeconfig or $KUBECONFIG)")
    contexts, current = k8s_config.list_kube_config_contexts(config_file=found)
    chosen = next((c for c in contexts if c["name"] == context), None) if context else current
    if context and chosen is None:
        raise k8s_config.ConfigException(f"context {context!r} is not in {found}")
    namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
    return KubeClient.from_kubeconfig(found, context=context), namespace


if __name__ == "__main__":
    sys.exit(main())
