"""A discrete-event simulation of a vLLM fleet: replicas, a router, Prometheus, a scaler.

Every replica is the simulator's own engine model (:class:`llmservice_operator.sim.engine.Engine`,
pure, driven by ``now``), so hours of traffic run in seconds. Around the engines:

* **Replicas** are created by the scaler, serve only after a GPU start-up / model-load delay
  (drawn per replica from a seeded sequence shared by every policy), and on scale-down stop
  taking requests and finish what they hold before their GPUs are released. Not-ready
  replicas go first, as a ReplicaSet deletes them first.
* **The router** is a least-request balancer: of two ready replicas drawn at random it sends
  each request to the one with fewer requests in flight (running + waiting), as Envoy's
  ``LEAST_REQUEST`` does by default (power of two choices; the default of Istio and Envoy
  Gateway). ``router="least"`` scans every ready replica instead (nginx ``least_conn``
  without slow start): a replica that just became ready then takes every request until it
  holds as many as the others, a burst of prefills whose last ones wait seconds for their
  first token. With no ready replica the request waits at the gateway and is sent on when one
  becomes ready (its TTFT counts the wait).
* **Prometheus** scrapes every ready replica's ``num_requests_waiting`` /
  ``num_requests_running`` / ``kv_cache_usage_perc`` / ``request_success_total`` /
  ``prompt_tokens_total`` / ``generation_tokens_total`` and the gateway's pending and arrived
  counts (requests and their tokens) every ``scrape_interval`` seconds; rates are over the
  last minute of scrapes (``rate(...[1m])``), peaks too (``max_over_time(...[1m])``); scalers
  see only the last scrape. Token counts are in the trace's tokens (the engine's times the
  token scale).
* **The scaler** (:class:`Scaler`) runs every ``interval`` seconds and returns the desired
  replica count.

GPU-hours count every replica from creation (loading included) to release, over the trace's
duration. Requests still in flight when the trace ends are finished (scalers keep running) so
that their TTFT counts.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from llmservice_operator.autoscale import Reading, ReplicaSample, counter_rate
from llmservice_operator.sim.engine import Engine, SchedulingPolicy
from llmservice_operator.sim.profile import EngineProfile

__all__ = [
    "FleetResult",
    "FleetView",
    "ReplicaPeak",
    "Request",
    "Router",
    "Scaler",
    "route",
    "simulate_fleet",
]


@dataclass(frozen=True)
class Request:
    time: float
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    """vLLM's per-request priority (lower first); used with ``scheduling_policy="priority"``."""


@dataclass(frozen=True)
class ReplicaPeak:
    """One ready replica's highest gauges over the last minute of scrapes
    (``max_over_time(...[1m])``)."""

    waiting: float
    kv_cache_usage: float


@dataclass(frozen=True)
class FleetView:
    """What a scaler sees at one evaluation."""

    now: float
    desired: int
    """Replicas the scaler asked for last (ready + loading; draining ones excluded)."""
    ready: int
    loading: int
    samples: tuple[ReplicaSample, ...]
    """Last scrape of the replicas that are ready now (a replica ready since then has none)."""
    scraped: bool
    """False until the first scrape (Prometheus "down" before it)."""
    gateway_waiting: int
    """Requests held at the gateway at the last scrape."""
    arrival_rate: float | None
    """Requests/s that reached the gateway over the minute before the last scrape."""
    peaks: tuple[ReplicaPeak, ...] = ()
    """The last minute's peaks of the replicas in ``samples`` (same order)."""
    arrived: tuple[int, int, int] = (0, 0, 0)
    """(requests, their prompt tokens, their output tokens) that reached the gateway up to the
    last scrape: the frontend's counters."""


class Scaler(Protocol):
    name: str
    interval: float

    def evaluate(self, view: FleetView) -> int: ...


@dataclass
class _Replica:
    rid: int
    engine: Engine
    created: float
    ready_at: float
    state: str = "loading"  # loading | ready | draining | gone
    released: float | None = None
    scheduled: bool = False
    completed: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    scrapes: list[Reading] = field(default_factory=list)
    prompt_scrapes: list[Reading] = field(default_factory=list)
    generated_scrapes: list[Reading] = field(default_factory=list)
    gauges: list[tuple[float, float, float]] = field(default_factory=list)
    """(time, waiting, KV usage) of the last minute's scrapes."""

    @property
    def outstanding(self) -> int:
        return self.engine.num_running + self.engine.num_waiting


#: ``p2c``: the fewer in flight of two random ready replicas (Envoy's default); ``least``: the
#: fewest in flight of all of them.
Router = Literal["p2c", "least"]
#: The router's random draws are seeded: every run of a scaler routes alike.
ROUTER_SEED = 12345

T = TypeVar("T")


def route(
    ready: Sequence[T], load: Callable[[T], tuple[int, int]], router: Router, draws: random.Random
) -> T:
    """The replica a request goes to: the least ``load`` (requests in flight, then a tie-break)
    of two drawn from ``draws`` (``p2c``) or of all of them (``least``)."""
    choices = draws.sample(list(ready), 2) if router == "p2c" and len(ready) > 2 else ready
    return min(choices, key=load)


@dataclass
class FleetResult:
    scaler: str
    duration_s: float
    ttft: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """Arrival time of the request of each ``ttft`` entry (same order)."""
    priorities: list[int] = field(default_factory=list)
    """Priority of the request of each ``ttft`` entry (same order): the per-tier split that
    vLLM's own histograms do not have."""
    max_waiting: int = 0
    """The most requests waiting (in the engines and at the gateway) at one scrape."""
    gpu_seconds: float = 0.0
    replica_timeline: list[tuple[float, int]] = field(default_factory=list)
    unfinished: int = 0

    def slo_attainment(self, ttft_slo_s: float) -> float:
        total = len(self.ttft) + self.unfinished
        return sum(1 for t in self.ttft if t <= ttft_slo_s) / total if total else 1.0

    def ttft_percentile(self, q: float) -> float:
        if not self.ttft:
            return float("nan")
        ordered = sorted(self.ttft)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def max_replicas(self) -> int:
        return max((n for _, n in self.replica_timeline), default=0)


_ARRIVAL, _READY, _STEP, _SCRAPE, _EVAL = range(5)


def simulate_fleet(
    requests: Sequence[Request],
    duration_s: float,
    scaler: Scaler,
    profile: EngineProfile,
    *,
    initial_replicas: int,
    startup_delays: Callable[[int], float],
    gpus_per_replica: int = 1,
    scrape_interval: float = 15.0,
    eval_offset: float = 5.0,
    drain_limit_s: float = 3600.0,
    token_scale: int = 1,
    measure_from: float = 0.0,
    router: Router = "p2c",
    scheduling_policy: SchedulingPolicy = "fcfs",
) -> FleetResult:
    """Run ``requests`` through a fleet that ``scaler`` sizes; ``startup_delays(i)`` is the
    load time of the i-th replica created (the same sequence for every scaler).

    With ``token_scale`` k > 1 one engine step stands for k decode iterations, so the step
    that finishes a prompt ends (k - 1) decode iterations after vLLM would have sampled the
    first token; that much of the step's decode time is taken off each first token.

    Only requests arriving at ``measure_from`` or later, and GPU time from then on, are
    counted: what comes before is a pre-roll that lets every scaler settle.
    ``scheduling_policy`` is every engine's (vLLM's ``--scheduling-policy``).
    """
    early = (token_scale - 1) / token_scale
    draws = random.Random(ROUTER_SEED)
    result = FleetResult(scaler=scaler.name, duration_s=duration_s)
    replicas: list[_Replica] = []
    counter = itertools.count()
    heap: list[tuple[float, int, int, int]] = []  # (time, kind, tie, replica id or 0)
    arrival_time: dict[str, float] = {}
    priority_of: dict[str, int] = {}
    first_token: dict[str, float] = {}
    gateway: list[tuple[str, int, int, int]] = []
    created = 0
    arrivals = 0
    samples: dict[int, ReplicaSample] = {}
    scraped = False
    gateway_scraped = 0
    arrival_scrapes: list[Reading] = []
    arrival_rate: float | None = None
    peaks: dict[int, ReplicaPeak] = {}
    arrived_tokens = [0, 0]
    arrived_scraped = (0, 0, 0)
    end = duration_s

    def push(t: float, kind: int, rid: int = 0) -> None:
        heapq.heappush(heap, (t, kind, next(counter), rid))

    def active() -> list[_Replica]:
        return [r for r in replicas if r.state in ("loading", "ready")]

    def note_count(now: float) -> None:
        n = len(active())
        if not result.replica_timeline or result.replica_timeline[-1][1] != n:
            result.replica_timeline.append((now, n))

    def create(now: float, ready_now: bool = False) -> None:
        nonlocal created
        delay = 0.0 if ready_now else startup_delays(created)
        created += 1
        replica = _Replica(
            len(replicas), Engine(profile, scheduling_policy=scheduling_policy), now, now + delay
        )
        replicas.append(replica)
        if ready_now:
            replica.state = "ready"
        else:
            push(now + delay, _READY, replica.rid)

    def release(replica: _Replica, now: float) -> None:
        replica.state = "gone"
        replica.released = now
        samples.pop(replica.rid, None)

    def dispatch(now: float, request_id: str, prompt: int, output: int, priority: int) -> None:
        ready = [r for r in replicas if r.state == "ready"]
        if not ready:
            gateway.append((request_id, prompt, output, priority))
            return
        target = route(ready, lambda r: (r.outstanding, r.rid), router, draws)
        target.engine.add_request(request_id, prompt, output, now, priority=priority)
        if not target.scheduled:
            target.scheduled = True
            push(now, _STEP, target.rid)

    def apply(now: float, desired: int) -> None:
        current = active()
        if desired > len(current):
            for _ in range(desired - len(current)):
                create(now)
        elif desired < len(current):
            # Not-ready first (newest first), then the ready ones holding the least work.
            order = sorted(
                current,
                key=lambda r: (r.state == "ready", r.outstanding, -r.created),
            )
            for replica in order[: len(current) - desired]:
                if replica.state == "loading":
                    release(replica, now)
                else:
                    replica.state = "draining"
                    samples.pop(replica.rid, None)
                    if not replica.engine.has_work():
                        release(replica, now)
        note_count(now)

    for _ in range(initial_replicas):
        create(0.0, ready_now=True)
    note_count(0.0)
    for index, req in enumerate(requests):
        push(req.time, _ARRIVAL, index)
    push(0.0, _SCRAPE)
    push(eval_offset, _EVAL)

    while heap:
        now, kind, _, rid = heapq.heappop(heap)
        if kind == _ARRIVAL:
            req = requests[rid]
            request_id = f"r{rid}"
            arrival_time[request_id] = req.time
            arrivals += 1
            arrived_tokens[0] += req.prompt_tokens * token_scale
            arrived_tokens[1] += req.output_tokens * token_scale
            priority_of[request_id] = req.priority
            dispatch(now, request_id, req.prompt_tokens, req.output_tokens, req.priority)
        elif kind == _STEP:
            replica = replicas[rid]
            step = replica.engine.step(now)
            if step is None:
                replica.scheduled = False
                if replica.state == "draining":
                    release(replica, now)
                continue
            if step.decode_batch and early:
                decode_s = profile.decode_step_ms(step.decode_batch, step.context_tokens) / 1e3
                first_at = step.end - early * decode_s
            else:
                first_at = step.end
            for token in step.tokens:
                if token.index == 1:
                    first_token[token.request_id] = first_at
            replica.completed += len(step.finished)
            replica.prompt_tokens += step.first_token_prompt_tokens * token_scale
            replica.generated_tokens += len(step.tokens) * token_scale
            for stats in step.finished:
                if stats.request_id in first_token:
                    first = first_token.pop(stats.request_id)
                    arrived = arrival_time.pop(stats.request_id)
                    priority = priority_of.pop(stats.request_id, 0)
                    if arrived >= measure_from:
                        result.ttft.append(first - arrived)
                        result.arrivals.append(arrived)
                        result.priorities.append(priority)
            push(step.end, _STEP, rid)
        elif kind == _READY:
            replica = replicas[rid]
            if replica.state != "loading":
                continue
            replica.state = "ready"
            pending, gateway[:] = list(gateway), []
            for request_id, prompt, output, priority in pending:
                dispatch(now, request_id, prompt, output, priority)
        elif kind == _SCRAPE:
            scraped = True
            waiting_now = sum(r.engine.num_waiting for r in replicas if r.state != "gone")
            result.max_waiting = max(result.max_waiting, waiting_now + len(gateway))
            samples = {}
            peaks = {}
            for r in replicas:
                if r.state != "ready":
                    continue
                r.scrapes, completion_rate = counter_rate([*r.scrapes, (now, r.completed)], now)
                r.prompt_scrapes, prompt_rate = counter_rate(
                    [*r.prompt_scrapes, (now, r.prompt_tokens)], now
                )
                r.generated_scrapes, generated_rate = counter_rate(
                    [*r.generated_scrapes, (now, r.generated_tokens)], now
                )
                kv = min(1.0, r.engine.kv_usage)
                samples[r.rid] = ReplicaSample(
                    waiting=r.engine.num_waiting,
                    running=r.engine.num_running,
                    kv_cache_usage=kv,
                    completion_rate=completion_rate,
                    ready_seconds=now - r.ready_at,
                    prompt_token_rate=prompt_rate,
                    generation_token_rate=generated_rate,
                )
                r.gauges = [g for g in r.gauges if g[0] > now - 60.0]
                r.gauges.append((now, r.engine.num_waiting, kv))
                peaks[r.rid] = ReplicaPeak(max(g[1] for g in r.gauges), max(g[2] for g in r.gauges))
            gateway_scraped = len(gateway)
            arrived_scraped = (arrivals, arrived_tokens[0], arrived_tokens[1])
            arrival_scrapes, arrival_rate = counter_rate([*arrival_scrapes, (now, arrivals)], now)
            if _more_to_do(now, end, arrival_time, drain_limit_s):
                push(now + scrape_interval, _SCRAPE)
        elif kind == _EVAL:
            ready = [r for r in replicas if r.state == "ready"]
            loading = [r for r in replicas if r.state == "loading"]
            view = FleetView(
                now=now,
                desired=len(ready) + len(loading),
                ready=len(ready),
                loading=len(loading),
                samples=tuple(samples[r.rid] for r in ready if r.rid in samples),
                scraped=scraped,
                gateway_waiting=gateway_scraped,
                arrival_rate=arrival_rate,
                peaks=tuple(peaks[r.rid] for r in ready if r.rid in samples),
                arrived=arrived_scraped,
            )
            apply(now, max(0, scaler.evaluate(view)))
            if _more_to_do(now, end, arrival_time, drain_limit_s):
                push(now + scaler.interval, _EVAL)

    result.unfinished = sum(1 for t in arrival_time.values() if t >= measure_from)
    for replica in replicas:
        stop = replica.released if replica.released is not None else end
        start = min(max(replica.created, measure_from), end)
        result.gpu_seconds += max(0.0, min(stop, end) - start)
    result.gpu_seconds *= gpus_per_replica
    return result


def _more_to_do(now: float, end: float, in_flight: dict[str, float], limit: float) -> bool:
    """Keep ticking while the trace runs, then until every request finished (or the limit)."""
    return now < end or (bool(in_flight) and now < end + limit)
