"""The online tier keeps its SLO while a batch backlog is queued: priority scheduling on the
simulated engines, the operator's autoscaler on their queue (benchmarks/fleet.py, virtual time).

The scenario: online chat (priority 0, Poisson 2 req/s, 256-token prompts, 128-token answers)
for 15 minutes; at minute 2 a batch job submits 3,000 requests at once (priority 10, prompts
128-1,024 tokens, answers 32-512). One replica to start, new replicas ready 60 s after they
are asked for. vLLM's queue gauge has no priority label, so the autoscaler sees the batch
backlog as queue depth and scales up to maxReplicas, then back down once it has drained; what
keeps the online tier's TTFT is each engine's priority scheduling (online requests take the
next free batch slot ahead of the whole backlog), with or without the extra replicas.
"""

from __future__ import annotations

import random
from functools import cache

from benchmarks.fleet import FleetResult, Request, simulate_fleet
from benchmarks.scalers import OperatorScaler

from llmservice_operator.autoscale.policy import PolicyConfig, default_target_queue_depth
from llmservice_operator.sim.engine import SchedulingPolicy
from llmservice_operator.sim.profile import fallback_profile

SEQS = 64
ONLINE, BATCH = 0, 10
BATCH_REQUESTS = 3000
DURATION_S = 900.0
ONLINE_TTFT_SLO_S = 0.8  # examples/llama-3.1-8b-tiers.yaml: the online tier's ttftP99Ms


def _traffic() -> list[Request]:
    rng = random.Random(7)
    requests, t = [], 0.0
    while t < DURATION_S:
        t += rng.expovariate(2.0)
        requests.append(Request(t, 256, 128, ONLINE))
    for i in range(BATCH_REQUESTS):
        prompt, output = rng.randint(128, 1024), rng.randint(32, 512)
        requests.append(Request(120.0 + i * 0.001, prompt, output, BATCH))
    return sorted(requests, key=lambda r: r.time)


@cache
def _run(policy: SchedulingPolicy, max_replicas: int) -> FleetResult:
    config = PolicyConfig(
        min_replicas=1,
        max_replicas=max_replicas,
        max_num_seqs=SEQS,
        target_queue_depth=default_target_queue_depth(SEQS),
    )
    return simulate_fleet(
        _traffic(),
        DURATION_S,
        OperatorScaler(config),
        fallback_profile(max_num_seqs=SEQS, max_model_len=4096),
        initial_replicas=1,
        startup_delays=lambda _: 60.0,
        scheduling_policy=policy,
    )


def _p99(result: FleetResult, priority: int) -> float:
    values = sorted(t for t, p in zip(result.ttft, result.priorities, strict=True) if p == priority)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


def _count(result: FleetResult, priority: int) -> int:
    return sum(1 for p in result.priorities if p == priority)


def test_priority_keeps_the_online_slo_while_the_autoscaler_scales_for_the_backlog() -> None:
    result = _run("priority", 4)
    assert result.max_waiting > BATCH_REQUESTS // 2  # the batch really queued
    assert _p99(result, ONLINE) <= ONLINE_TTFT_SLO_S
    assert result.max_replicas() == 4  # the queue signal counts the batch backlog
    assert result.replica_timeline[-1][1] == 1  # and it scaled back once it drained
    assert _count(result, BATCH) == BATCH_REQUESTS and result.unfinished == 0


def test_fcfs_puts_the_online_tier_behind_the_backlog() -> None:
    fcfs, prio = _run("fcfs", 4), _run("priority", 4)
    assert _p99(fcfs, ONLINE) > 60 * ONLINE_TTFT_SLO_S
    assert fcfs.replica_timeline[:2] == prio.replica_timeline[:2]  # same scaling, same GPUs


def test_priority_alone_holds_the_online_slo_at_one_replica() -> None:
    one = _run("priority", 1)
    assert one.max_replicas() == 1
    assert _p99(one, ONLINE) <= ONLINE_TTFT_SLO_S
    assert _p99(_run("fcfs", 1), ONLINE) > 60 * ONLINE_TTFT_SLO_S
