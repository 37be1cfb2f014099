"""``kubectl llms``: steer LLMService rollouts, as ``kubectl argo rollouts`` steers Rollouts.

Installed with the package as the executable ``kubectl-llms``, which kubectl runs as the
plugin ``kubectl llms``. It talks to the API server only (the kubeconfig's, or
``--kubeconfig``/``--context``): it reads the LLMService, its Deployments and Pods, and a
control is an annotation on the LLMService that the operator acts on once and removes
(``llmservice.dev/<control>``, valued with the revision it is meant for). It needs no access
to the operator; the person running it needs ``get``/``list``/``watch`` on llmservices,
deployments and pods and ``patch`` on llmservices.

    kubectl llms get NAME [--watch]         the rollout: revisions, pods, step, weight, checks
    kubectl llms promote NAME [--full]      end the current step / skip every remaining step
    kubectl llms abort NAME                 take the candidate out (kept at 0 until retry)
    kubectl llms retry NAME                 run an aborted or rolled-back revision again
    kubectl llms pause NAME | resume NAME   hold the rollout at its step / go on
    kubectl llms skip-analysis NAME         no more analysis in this rollout
    kubectl llms history NAME               revisions, what changed, how each ended
    kubectl llms undo NAME [--to-revision N] [--apply]
                                            the spec patch back to a revision (print or apply)

Errors are one line on stderr (``kubectl llms <command>: error: ...``) with exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from ..api import GROUP, PLURAL, VERSION
from ..commands.errors import OneLineParser, one_line
from ..render.labels import SERVICE
from . import view

__all__ = ["main"]

PROG = "kubectl llms"
_CONTROL_COMMANDS = ("promote", "abort", "retry", "pause", "resume", "skip-analysis")


class _Error(Exception):
    """One line for stderr."""


def _parser() -> OneLineParser:
    parser = OneLineParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", "--namespace", help="the LLMService's namespace (default: context's)")
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context to use")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    get = commands.add_parser(
        "get", help="show the rollout as a tree, with each check's measurements"
    )
    get.add_argument("name", metavar="NAME")
    get.add_argument("-w", "--watch", action="store_true", help="print it again on each change")
    get.add_argument(
        "--interval", type=float, default=1.0, help="seconds between reads with --watch (1)"
    )
    get.add_argument(
        "--timeout", type=float, help="with --watch: stop after this many seconds (default: never)"
    )

    promote = commands.add_parser(
        "promote",
        help="end the current step (a pause, an analysis; approve a blue-green switch)",
    )
    promote.add_argument("name", metavar="NAME")
    promote.add_argument(
        "--full",
        action="store_true",
        help="skip every remaining step, pause and analysis (not the smoke test, nor the wait "
        "for the candidate's replicas)",
    )
    for name, text in (
        ("abort", "take the candidate out: stable to full size, then traffic; kept at 0"),
        ("retry", "run the aborted or rolled-back revision again, from the start"),
        ("pause", "hold the rollout at its step (analyses keep judging)"),
        ("resume", "lift a person's pause, else the step's pause"),
        ("skip-analysis", "no more analysis (steps, background, post-promotion) in this rollout"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("name", metavar="NAME")

    history = commands.add_parser("history", help="the revisions, what changed, how each ended")
    history.add_argument("name", metavar="NAME")

    undo = commands.add_parser(
        "undo", help="the spec patch that asks for an earlier revision again (--apply: apply it)"
    )
    undo.add_argument("name", metavar="NAME")
    undo.add_argument(
        "--to-revision",
        type=int,
        metavar="N",
        help="the revision number (kubectl llms history); default: the last one that served "
        "as stable before the current one",
    )
    undo.add_argument(
        "--apply",
        action="store_true",
        help="patch the LLMService (without it: print the patch, for a change in Git)",
    )
    return parser


class _Cluster:
    """The API server, through the kubeconfig."""

    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
        from kubernetes import client, config

        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                    api_client = client.ApiClient()
                    default_namespace = "default"
                except config.ConfigException:
                    api_client, default_namespace = self._from_file(None, None)
            else:
                api_client, default_namespace = self._from_file(kubeconfig, context)
        except (config.ConfigException, OSError) as err:
            raise _Error(f"no usable kubeconfig: {err}") from None
        self.namespace = namespace or default_namespace
        self._custom = client.CustomObjectsApi(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._core = client.CoreV1Api(api_client)

    @staticmethod
    def _from_file(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
        from kubernetes import config

        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        chosen = next((c for c in contexts if c["name"] == context), None) if context else active
        if context and chosen is None:
            raise config.ConfigException(f"no context {context!r}")
        namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        return api_client, namespace

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return call(*args, **kwargs)
        except ApiException as err:
            message = err.reason
            with contextlib.suppress(ValueError, AttributeError):
                message = json.loads(err.body or "{}").get("message") or message
            raise _Error(f"{what}: {message}") from None
        except (HTTPError, OSError) as err:
            raise _Error(f"{what}: cannot reach the API server: {err}") from None

    def llmservice(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self._call(
            f"llmservice {self.namespace}/{name}",
            self._custom.get_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, name,
        )  # fmt: skip
        return obj

    def owned(self, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        selector = f"{SERVICE}={name}"
        deployments = self._call(
            "deployments", self._apps.list_namespaced_deployment, self.namespace,
            label_selector=selector, _preload_content=False,
        )  # fmt: skip
        pods = self._call(
            "pods", self._core.list_namespaced_pod, self.namespace,
            label_selector=selector, _preload_content=False,
        )  # fmt: skip
        return json.loads(deployments.data)["items"], json.loads(pods.data)["items"]

    def patch(self, name: str, body: dict[str, Any]) -> None:
        self._call(
            f"patching llmservice {self.namespace}/{name}",
            self._custom.patch_namespaced_custom_object,
            GROUP, VERSION, self.namespace, PLURAL, name, body,
        )  # fmt: skip


def _get(cluster: _Cluster, args: argparse.Namespace) -> int:
    if not args.watch:
        obj = cluster.llmservice(args.name)
        deployments, pods = cluster.owned(args.name)
        sys.stdout.write(view.render_get(obj, deployments, pods, datetime.now(UTC)))
        return 0
    if args.interval <= 0:
        raise _Error("--interval must be > 0")
    tty = sys.stdout.isatty()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    shown: str | None = None
    printed = False
    while deadline is None or time.monotonic() < deadline:
        try:
            obj = cluster.llmservice(args.name)
            deployments, pods = cluster.owned(args.name)
        except _Error as err:  # a busy API server: say so, and read again
            print(f"{PROG} get: {err}", file=sys.stderr)
        else:
            frame = view.render_get(obj, deployments, pods, datetime.now(UTC))
            # Ages tick every second: a frame is new when anything but its ages changed.
            key = view.render_get(obj, deployments, pods, None)
            if key != shown:
                shown = key
                if tty:
                    sys.stdout.write("\x1b[H\x1b[2J")
                elif printed:
                    sys.stdout.write("\n")  # frames one after the other, a blank line between
                printed = True
                sys.stdout.write(frame)
                sys.stdout.flush()
        time.sleep(args.interval)
    return 0


def _control(cluster: _Cluster, args: argparse.Namespace) -> int:
    command = "promote-full" if args.command == "promote" and args.full else args.command
    obj = cluster.llmservice(args.name)
    try:
        wanted = view.control(obj, command)
    except ValueError as err:
        raise _Error(str(err)) from None
    cluster.patch(args.name, {"metadata": {"annotations": {wanted.annotation: wanted.value}}})
    print(
        f"llmservice {cluster.namespace}/{args.name}: {wanted.says} requested "
        f"({wanted.annotation}); the operator acts on it and removes the annotation"
    )
    return 0


def _history(cluster: _Cluster, args: argparse.Namespace) -> int:
    sys.stdout.write(view.render_history(cluster.llmservice(args.name)))
    return 0


def _undo(cluster: _Cluster, args: argparse.Namespace) -> int:
    obj = cluster.llmservice(args.name)
    try:
        patch, about = view.undo_patch(obj, args.to_revision)
    except ValueError as err:
        raise _Error(str(err)) from None
    name = f"{cluster.namespace}/{args.name}"
    if not patch:
        print(f"# llmservice {name}'s spec already asks for {about}")
        return 0
    if args.apply:
        cluster.patch(args.name, patch)
        print(f"llmservice {name}: spec patched back to {about}")
        return 0
    print(f"# llmservice {name}: this JSON merge patch of the spec asks for {about} again.")
    print("# In Git, change the spec the same way; or apply it here with --apply, or with:")
    print(
        f"#   kubectl -n {cluster.namespace} patch llmservice {args.name} --type merge "
        f"-p '{json.dumps(patch, separators=(',', ':'))}'"
    )
    sys.stdout.write(yaml.safe_dump(patch, sort_keys=False, default_flow_style=False))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        cluster = _Cluster(args.kubeconfig, args.context, args.namespace)
        if args.command == "get":
            return _get(cluster, args)
        if args.command in _CONTROL_COMMANDS:
            return _control(cluster, args)
        if args.command == "history":
            return _history(cluster, args)
        return _undo(cluster, args)
    except _Error as err:
        print(f"{PROG} {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
