"""cost.py: status.cost integrated from the GPUs a service's replicas hold, with a fixed clock;
the reconcile writes it only when it changes; the metrics export its totals."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from llmservice_operator.adapters.metrics import OperatorMetrics
from llmservice_operator.api.capacity import COST_DAYS, COST_HOURS, CostStatus
from llmservice_operator.api.crd import crd_manifest
from llmservice_operator.cost import (
    GpuUsage,
    account,
    cost_due,
    pod_gpus,
    service_cost,
    usage_from_deployments,
)
from llmservice_operator.reconcile import Reconciler
from llmservice_operator.sizing import load_catalog

from .test_reconcile import FakeKube
from .test_reconcile import _body as reconcile_body

CATALOG = load_catalog()
H100 = CATALOG.get("H100-80GB")
L4 = CATALOG.get("L4")
T0 = datetime(2026, 12, 1, 10, 30, 0, tzinfo=UTC)


def _usage(gpus: int, gpu: Any = H100) -> GpuUsage:
    return GpuUsage(gpus, round(gpus * gpu.price_per_gpu_hour, 6))


def _run(steps: list[tuple[float, int]], start: datetime = T0) -> CostStatus:
    """``account`` at each (hours after start, GPUs held from then on)."""
    cost: CostStatus | None = None
    for hours, gpus in steps:
        cost = account(cost, _usage(gpus), start + timedelta(hours=hours))
    assert cost is not None
    return cost


def test_the_catalog_prices_every_built_in_gpu() -> None:
    for gpu in CATALOG.gpus:
        assert gpu.price_per_gpu_hour is not None and gpu.price_per_gpu_hour > 0, gpu.name
    assert L4.price_per_gpu_hour is not None and H100.price_per_gpu_hour is not None
    assert L4.price_per_gpu_hour < H100.price_per_gpu_hour


def test_gpus_held_for_hours_are_gpu_hours_at_the_price() -> None:
    cost = _run([(0, 8), (2.5, 8)])  # 8 GPUs for two and a half hours, then still 8
    assert cost.gpu_hours_total == pytest.approx(20.0)
    assert cost.cost_total == pytest.approx(20.0 * H100.price_per_gpu_hour)  # type: ignore[operator]
    assert cost.gpu_hours_24h == pytest.approx(20.0)
    assert cost.gpu_hours_30d == pytest.approx(20.0)
    assert cost.accounted_until == "2026-12-01T13:00:00Z"
    # Split at the hour boundaries: 10:30-11:00, 11-12, 12-13.
    assert [(b.start, b.gpu_hours) for b in cost.hourly] == [
        ("2026-12-01T10:00:00Z", 4.0),
        ("2026-12-01T11:00:00Z", 8.0),
        ("2026-12-01T12:00:00Z", 8.0),
    ]
    assert [(b.start, b.gpu_hours) for b in cost.daily] == [("2026-12-01T00:00:00Z", 20.0)]


def test_a_change_of_count_folds_the_time_at_the_count_held_before() -> None:
    cost = _run([(0, 2), (0.5, 6), (1.0, 0)])  # 2 GPUs half an hour, 6 half an hour, then none
    assert cost.gpu_hours_total == pytest.approx(1.0 + 3.0)
    assert cost.gpus == 0 and cost.cost_per_hour == 0
    later = account(cost, _usage(0), T0 + timedelta(hours=5))
    assert later.gpu_hours_total == pytest.approx(4.0), "nothing held, nothing counted"


def test_the_same_count_within_an_hour_is_the_same_status_so_nothing_is_written() -> None:
    first = account(None, _usage(4), T0)
    assert first.gpu_hours_total == 0 and first.since == first.accounted_until
    again = first
    for minutes in (1, 15, 59):
        again = account(again, _usage(4), T0 + timedelta(minutes=minutes))
        assert again is first
    assert cost_due(first) == T0 + timedelta(hours=1)
    hourly = account(first, _usage(4), T0 + timedelta(hours=1))
    assert hourly is not first and hourly.gpu_hours_total == pytest.approx(4.0)
    changed = account(first, _usage(5), T0 + timedelta(minutes=10))
    assert changed.gpus == 5 and changed.gpu_hours_total == pytest.approx(4 / 6)


def test_the_24_hour_window_rolls_off_the_oldest_hour_in_proportion() -> None:
    # 1 GPU from 10:30, folded every hour for two days (until 11:00 two days later).
    steps = [(0.0, 1)] + [(h + 0.5, 1) for h in range(49)]
    cost = _run(steps)
    assert cost.accounted_until == "2026-12-03T11:00:00Z"
    assert cost.gpu_hours_24h == pytest.approx(24.0)
    assert cost.gpu_hours_total == pytest.approx(48.5)
    assert len(cost.hourly) == COST_HOURS - 1  # 11:00 to 11:00 has no GPU-hour yet
    # Then none from 11:00: at 23:30 the window (23:30 the day before to now) holds 11.5
    # GPU-hours: half of the 23:00 hour, and 00:00 to 11:00.
    stopped = account(cost, _usage(0), T0 + timedelta(hours=48.6))
    idle = account(stopped, _usage(0), T0 + timedelta(hours=61))
    assert idle.accounted_until == "2026-12-03T23:30:00Z"
    assert idle.gpu_hours_24h == pytest.approx(11.5 + 0.1)
    assert idle.gpu_hours_total == pytest.approx(48.6)


def test_the_30_day_window_and_the_bounded_history() -> None:
    """One GPU for 40 days, folded every hour: the history stays bounded, the 30-day window
    holds 720 GPU-hours, the total all 960."""
    cost = account(None, _usage(1, L4), T0.replace(minute=0))
    for hour in range(1, 40 * 24 + 1):
        cost = account(cost, _usage(1, L4), T0.replace(minute=0) + timedelta(hours=hour))
    assert len(cost.hourly) <= COST_HOURS and len(cost.daily) <= COST_DAYS
    assert cost.gpu_hours_30d == pytest.approx(720.0)
    assert cost.gpu_hours_24h == pytest.approx(24.0)
    assert cost.gpu_hours_total == pytest.approx(960.0)
    assert cost.cost_30d == pytest.approx(720.0 * L4.price_per_gpu_hour)  # type: ignore[operator]


def test_an_operator_down_for_a_day_counts_the_count_it_last_saw() -> None:
    cost = _run([(0, 2), (26, 2)])
    assert cost.gpu_hours_total == pytest.approx(52.0)
    assert cost.gpu_hours_24h == pytest.approx(48.0)


def test_a_clock_behind_the_last_fold_integrates_nothing() -> None:
    cost = _run([(0, 2), (2, 2)])
    behind = account(cost, _usage(3), T0 + timedelta(hours=1))
    assert behind.gpu_hours_total == cost.gpu_hours_total and behind.gpus == 3


# -- what the replicas hold ---------------------------------------------------------------------


def _deployment(replicas: int, gpus: int, label: str = "NVIDIA-H100-80GB-HBM3") -> dict[str, Any]:
    """A revision's Deployment as the watch has it: its pod template's affinity and GPU limits,
    and the non-terminated pods it counts."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": [label]}
                        ]
                    }
                ]
            }
        }
    }
    containers = [
        {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "64Gi"}}},
        {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
    ]
    return {
        "spec": {"template": {"spec": {"affinity": affinity, "containers": containers}}},
        "status": {"replicas": replicas},
    }


def test_replicas_times_the_gpus_their_pods_ask_for() -> None:
    usage = usage_from_deployments([_deployment(3, 2), _deployment(0, 2)], CATALOG, "L4")
    assert usage.gpus == 6
    assert usage.cost_per_hour == pytest.approx(6 * H100.price_per_gpu_hour)  # type: ignore[operator]
    assert pod_gpus(_deployment(1, 3)["spec"]["template"], ["nvidia.com/gpu"]) == 3
    no_status = _deployment(1, 2)
    del no_status["status"]
    assert usage_from_deployments([no_status], CATALOG, None).gpus == 0


def test_the_gpu_type_comes_from_the_node_affinity_else_the_sizing() -> None:
    """A rollout from L4 to H100: each revision priced at its own GPU."""
    both = usage_from_deployments(
        [_deployment(2, 1, label="NVIDIA-L4"), _deployment(1, 1)], CATALOG, None
    )
    expected = 2 * L4.price_per_gpu_hour + H100.price_per_gpu_hour  # type: ignore[operator]
    assert both.cost_per_hour == pytest.approx(expected)
    unknown = usage_from_deployments([_deployment(1, 1, label="NVIDIA-B300")], CATALOG, "L4")
    assert unknown.cost_per_hour == pytest.approx(L4.price_per_gpu_hour)  # type: ignore[arg-type]
    unpriced = usage_from_deployments(
        [_deployment(1, 1)],
        CATALOG.merged([{"name": "H100-80GB", "price_per_gpu_hour": None}]),
        None,
    )
    assert (unpriced.gpus, unpriced.cost_per_hour, unpriced.unpriced) == (1, 0.0, ("H100-80GB",))


def test_a_service_starts_accounting_from_its_first_observation() -> None:
    body: dict[str, Any] = {"status": {"sizing": {"gpuType": "H100-80GB"}}}
    first = service_cost(body, [_deployment(1, 2)], CATALOG, None, T0)
    assert first.cost_per_hour == pytest.approx(2 * H100.price_per_gpu_hour)  # type: ignore[operator]
    body["status"]["cost"] = first.model_dump(by_alias=True, mode="json")
    later = service_cost(body, [_deployment(1, 2)], CATALOG, None, T0 + timedelta(hours=3))
    assert later.gpu_hours_total == pytest.approx(6.0) and later.since == first.since
    body["status"]["cost"] = {"garbage": True}
    assert service_cost(body, [], CATALOG, None, T0).gpu_hours_total == 0


# -- the reconcile and the metrics --------------------------------------------------------------


def test_the_reconcile_writes_cost_when_it_changes_and_exports_its_totals() -> None:
    clock = [T0]
    body = reconcile_body()  # manual mode, 1 replica of 1x H100-80GB
    kube = FakeKube(body)
    metrics = OperatorMetrics.create()
    reconciler = Reconciler(kube, CATALOG, "http://p:9090", metrics, clock=lambda: clock[0])
    for _ in range(3):
        result = reconciler.reconcile(copy.deepcopy(kube.body))
    cost = kube.body["status"]["cost"]
    assert cost["gpus"] == 1 and cost["costPerHour"] == H100.price_per_gpu_hour
    assert result.requeue_at == T0 + timedelta(hours=1)
    patches = len(kube.status_patches)
    for minutes in range(5, 60, 5):  # at rest: nothing changes within the hour
        clock[0] = T0 + timedelta(minutes=minutes)
        result = reconciler.reconcile(copy.deepcopy(kube.body))
        assert not result.wrote_status
    assert len(kube.status_patches) == patches
    clock[0] = T0 + timedelta(hours=1)
    result = reconciler.reconcile(copy.deepcopy(kube.body))
    assert result.wrote_status
    assert set(kube.status_patches[-1]) == {"cost"}, "the hourly fold writes the cost alone"
    assert kube.body["status"]["cost"]["gpuHoursTotal"] == pytest.approx(1.0)
    exposed = generate_latest(metrics.registry).decode()
    assert 'llmservice_gpu_hours_total{namespace="ml",service="chat"} 1.0' in exposed
    assert f'llmservice_cost_total{{namespace="ml",service="chat"}} {H100.price_per_gpu_hour}' in (
        exposed
    )
    # Scaled to 3 replicas: the count changes with status.replicas, in the same write.
    kube.body["spec"]["replicas"] = 3
    kube.body["spec"]["scaling"]["maxReplicas"] = 3
    kube.body["metadata"].update(generation=2, resourceVersion="1000")
    clock[0] += timedelta(minutes=10)
    for _ in range(3):
        reconciler.reconcile(copy.deepcopy(kube.body))
    assert kube.body["status"]["replicas"] == 3 and kube.body["status"]["cost"]["gpus"] == 3
    for patch in kube.status_patches:
        if "gpus" in (patch.get("cost") or {}):
            assert "replicas" in patch, patch
    reconciler.forget(("ml", "chat"))
    assert 'service="chat"' not in generate_latest(metrics.registry).decode()


def test_kubectl_get_wide_shows_the_cost() -> None:
    columns = crd_manifest()["spec"]["versions"][0]["additionalPrinterColumns"]
    wide = {c["name"]: c for c in columns if c.get("priority") == 1}
    assert wide["GPU-Hours/24h"]["jsonPath"] == ".status.cost.gpuHours24h"
    assert wide["Cost/30d"]["jsonPath"] == ".status.cost.cost30d"
    plain = [c["name"] for c in columns if not c.get("priority")]
    assert "Cost/30d" not in plain
