"""`llmservice plan -f FILE.yaml`: sizing on stderr, manifests on stdout (like helm template)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from ..api import SpecError, parse_llmservice
from ..service_plan import ServicePlan, plan_service
from ..sizing import load_catalog

__all__ = ["add_parser", "plan_documents", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("plan", help="print the manifests an LLMService renders to")
    parser.add_argument("-f", "--filename", type=Path, required=True, help="LLMService YAML")
    parser.add_argument("--gpu-catalog", type=Path, help="YAML file overriding the GPU catalog")
    parser.add_argument("--prometheus-url", default="http://prometheus.monitoring.svc:9090")


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
    return "\n".join(lines)


def plan_documents(path: Path, catalog_path: Path | None, prometheus_url: str) -> list[ServicePlan]:
    catalog = load_catalog(catalog_path)
    plans = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is None:
            continue
        plans.append(plan_service(parse_llmservice(doc), catalog, prometheus_url))
    return plans


def run(args: argparse.Namespace) -> int:
    try:
        plans = plan_documents(args.filename, args.gpu_catalog, args.prometheus_url)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    docs = []
    for plan in plans:
        print(_summary(plan), file=sys.stderr)
        docs.extend(plan.objects)
    print(yaml.safe_dump_all(docs, sort_keys=False, width=100), end="")
    return 0
