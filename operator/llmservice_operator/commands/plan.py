"""`llmservice plan -f FILE.yaml`: sizing on stderr, manifests on stdout (like helm template)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from ..api import SpecError, parse_llmservice
from ..render.cache_layout import cache_claim_name, cached_model_path
from ..render.template_json import LONE_SURROGATE, lone_surrogate
from ..service_plan import ServicePlan, plan_service
from ..sizing import SizingError, load_catalog
from .errors import CommandError, read_utf8, report

__all__ = ["add_parser", "plan_documents", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="print the manifests an LLMService renders to",
        description=(
            "Size each LLMService in FILE (on stderr) and print the objects it renders to (on "
            "stdout, like helm template). Exit 0, or 1 with one line on stderr saying what to "
            "change (a spec that is invalid or does not fit, a file that cannot be read)."
        ),
    )
    parser.add_argument(
        "-f", "--filename", type=Path, required=True, help="YAML of one or more LLMServices"
    )
    parser.add_argument("--gpu-catalog", type=Path, help="YAML file overriding the GPU catalog")
    parser.add_argument(
        "--prometheus-url",
        default="http://prometheus.monitoring.svc:9090",
        help="where a keda scaler queries the queue depth (default %(default)s)",
    )


def _summary(plan: ServicePlan) -> str:
    r = plan.sizing
    gib = 1024**3
    lines = [
        f"# {plan.service.metadata.namespace}/{plan.service.metadata.name}: {r.summary()}",
        f"#   parameters {r.parameter_count / 1e9:.2f} B, weights {r.weight_bytes / gib:.1f} GiB, "
        f"KV {r.kv_cache_bytes_per_token} B/token",
        f"#   max_num_seqs {r.max_num_seqs}, decode ~{r.decode_ms_per_token_at_batch1:.1f} ms/token, "
        f"prefill ~{r.prefill_ms_per_1k_tokens:.1f} ms/1k tokens",
        f"#   {r.reason}",
    ]
    lines += [f"#   warning: {w}" for w in r.warnings]
    model = plan.service.spec.model
    if model.cache is not None:
        lines.append(
            f"#   model cache: {cached_model_path(model)} on PVC "
            f"{cache_claim_name(plan.service.metadata.name, model)}, filled by a download Job "
            "(the operator's image) before the Deployment is made"
        )
    return "\n".join(lines)


def plan_documents(path: Path, catalog_path: Path | None, prometheus_url: str) -> list[ServicePlan]:
    catalog = load_catalog(catalog_path)
    text = read_utf8(path)
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise CommandError(f"{path} is not YAML: {err}") from None
    except ValueError as err:  # a value YAML parses but Python refuses (an integer too long)
        raise CommandError(f"{path}: {err}") from None
    plans = []
    for number, doc in enumerate(docs, 1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise CommandError(f"{path}: document {number} is not a mapping (an LLMService)")
        found = lone_surrogate(doc.get("spec"), "spec")  # a JSON file's "\ud83d" alone
        if found is not None:
            raise SpecError(found[0], f"holds {found[1]}, {LONE_SURROGATE}")
        plans.append(plan_service(parse_llmservice(doc), catalog, prometheus_url))
    return plans


def run(args: argparse.Namespace) -> int:
    path = args.filename
    try:
        plans = plan_documents(path, args.gpu_catalog, args.prometheus_url)
    except SpecError as err:
        return report("plan", f"{path}: {err}")
    except SizingError as err:  # the only sizing input plan reads itself: the catalog
        return report("plan", f"--gpu-catalog: {err}")
    except CommandError as err:
        return report("plan", err)
    if not plans:
        return report("plan", f"{path} holds no LLMService")
    docs = []
    for plan in plans:
        print(_summary(plan), file=sys.stderr)
        docs.extend(plan.objects)
    print(yaml.safe_dump_all(docs, sort_keys=False, width=100), end="")
    return 0
