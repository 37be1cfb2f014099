"""Priority scheduling in the simulated engine, with vLLM 0.33's semantics.

vLLM (``vllm/v1/core/sched/scheduler.py``, ``request_queue.py``): the waiting queue is ordered
by (priority, arrival), lower values first; when the KV cache runs out the running request
with the largest (priority, arrival) is preempted (fcfs: the newest running one); with fcfs a
request's priority is ignored.
"""

from __future__ import annotations

from llmservice_operator.sim.engine import Arrival, RequestStats, SchedulingPolicy, simulate
from llmservice_operator.sim.profile import EngineProfile, linear_profile


def profile(kv_tokens: int = 1600, max_num_seqs: int = 256) -> EngineProfile:
    return linear_profile(
        kv_capacity_tokens=kv_tokens,
        max_model_len=160,
        decode_base_ms=5.0,
        decode_per_seq_ms=0.1,
        decode_per_context_token_ms=0.0,
        prefill_per_token_ms=0.05,
        max_num_seqs=max_num_seqs,
    )


def by_id(requests: list[RequestStats]) -> dict[str, RequestStats]:
    return {r.request_id: r for r in requests}


def scheduling_order(requests: list[RequestStats]) -> list[str]:
    started = [r for r in requests if r.first_scheduled is not None]
    return [r.request_id for r in sorted(started, key=lambda r: (r.first_scheduled, r.arrival))]


# One batch slot: A runs; B, C, D wait, then are served in the policy's order.
ONE_SLOT = [
    Arrival(0.0, 50, 20, "a", priority=10),
    Arrival(0.0001, 50, 20, "b", priority=10),
    Arrival(0.0002, 50, 20, "c", priority=0),
    Arrival(0.0003, 50, 20, "d", priority=5),
    Arrival(0.0004, 50, 20, "e", priority=0),
]


def test_priority_serves_the_waiting_queue_by_priority_then_arrival() -> None:
    result = simulate(profile(max_num_seqs=1), ONE_SLOT, scheduling_policy="priority")
    # a was already running; c and e (0) before d (5) before b (10); c before e: arrival.
    assert scheduling_order(result.requests) == ["a", "c", "e", "d", "b"]
    assert by_id(result.requests)["c"].priority == 0


def test_fcfs_serves_in_arrival_order_and_ignores_priority() -> None:
    result = simulate(profile(max_num_seqs=1), ONE_SLOT, scheduling_policy="fcfs")
    assert scheduling_order(result.requests) == ["a", "b", "c", "d", "e"]
    unprioritised = [
        Arrival(a.time, a.prompt_tokens, a.output_tokens, a.request_id) for a in ONE_SLOT
    ]
    plain = simulate(profile(max_num_seqs=1), unprioritised, scheduling_policy="fcfs")
    timings = [(r.request_id, r.first_token, r.finished) for r in result.requests]
    assert timings == [(r.request_id, r.first_token, r.finished) for r in plain.requests]


def _kv_pressure() -> list[Arrival]:
    """14 batch prompts of 100 tokens take 98 of the 100 KV blocks; one online request (one
    block) is admitted after them, the newest running. At token 112 each batch sequence needs an
    eighth block: the pool runs out and something must be preempted."""
    batch = [Arrival(i * 1e-6, 100, 60, f"batch-{i:02d}", priority=10) for i in range(14)]
    return [*batch, Arrival(0.001, 16, 60, "online", priority=0)]


def _run(policy: SchedulingPolicy) -> dict[str, RequestStats]:
    result = simulate(profile(kv_tokens=1600), _kv_pressure(), scheduling_policy=policy)
    assert result.num_preemptions > 0
    assert len(result.requests) == 15
    assert all(r.generation_tokens == 60 for r in result.requests)
    return by_id(result.requests)


def test_kv_pressure_preempts_the_newest_under_fcfs() -> None:
    stats = _run("fcfs")
    assert stats["online"].num_preemptions >= 1  # it was the newest running sequence


def test_kv_pressure_preempts_the_lowest_priority_under_priority() -> None:
    fcfs, prio = _run("fcfs"), _run("priority")
    assert prio["online"].num_preemptions == 0
    # the victims are the batch sequences that rank last: the latest arrivals among equals
    victims = sorted(r for r, s in prio.items() if s.num_preemptions)
    assert victims and all(v.startswith("batch-") for v in victims)
    assert "batch-13" in victims and "batch-00" not in victims
    assert prio["online"].e2e < fcfs["online"].e2e


def test_an_online_arrival_jumps_a_deep_batch_queue() -> None:
    """Eight slots busy with batch work and 200 batch requests queued: an online request takes
    the next free slot under priority, and waits behind the whole queue under fcfs."""
    batch = [Arrival(0.0, 50, 40, f"batch-{i:03d}", priority=10) for i in range(208)]
    arrivals = [*batch, Arrival(0.05, 50, 40, "online", priority=0)]
    prio = by_id(
        simulate(
            profile(kv_tokens=160_000, max_num_seqs=8), arrivals, scheduling_policy="priority"
        ).requests
    )
    fcfs = by_id(
        simulate(
            profile(kv_tokens=160_000, max_num_seqs=8), arrivals, scheduling_policy="fcfs"
        ).requests
    )
    one_request = max(r.e2e for r in prio.values() if r.request_id == "batch-000")
    online_ttft, fcfs_ttft = prio["online"].ttft, fcfs["online"].ttft
    assert online_ttft is not None and fcfs_ttft is not None
    assert online_ttft < one_request + 0.05  # at most one batch generation's wait
    assert fcfs_ttft > 20 * online_ttft
