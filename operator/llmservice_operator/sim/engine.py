"""A continuous-batching engine model in the shape of vLLM's V1 scheduler. Pure: no clock.

Every call takes ``now`` (simulated seconds) and returns what happens; nothing sleeps. The model:

* A sequence holds ``prompt + generated`` tokens; the KV pool is ``num_blocks`` blocks of
  ``block_size`` tokens, and a sequence owns ``ceil(computed_tokens / block_size)`` blocks.
* One engine step schedules, in priority order, the running sequences (one decode token each,
  or the next chunk of a prompt still being prefilled), then admits waiting sequences FIFO
  while ``max_num_seqs`` and the KV pool allow, all within ``max_num_batched_tokens`` new
  tokens (chunked prefill). A sequence whose last prompt chunk (or decode token) is computed
  samples one output token at the end of the step.
* When a running sequence needs a block and none is free, the newest running sequence is
  preempted (its blocks freed, recomputed later from scratch: vLLM's recompute preemption)
  and nothing new is admitted that step. With ``kv_policy="reserve"`` a sequence instead
  reserves blocks for its whole lifetime on admission and is never preempted.
* ``scheduling_policy="priority"`` is vLLM's ``--scheduling-policy priority`` (read from
  ``vllm/v1/core/sched/scheduler.py`` and ``request_queue.py`` of 0.33.0; 0.32 is the same):
  each request carries an integer ``priority`` (lower is served first); the waiting queue is
  ordered by (priority, arrival), a preempted request goes back into it by the same key
  (fcfs puts it at the front); when a running sequence needs a block and none is free, the
  victim is the running sequence with the largest (priority, arrival), even one already
  scheduled this step (its tokens go back to the budget), and a sequence that was itself the
  victim lets the next running one try. As in vLLM, a waiting request never preempts a running
  one directly: a high-priority arrival takes the next free batch slot or KV room ahead of every
  lower-priority request, and lower-priority running work is what KV pressure evicts. With
  fcfs a request's priority is ignored (vLLM accepts and ignores it too).
* Step duration = ``prefill_ms(prompt tokens in the step)`` +
  ``decode_step_ms(decode batch, context tokens of that batch) x decode_slowdown``; so TTFT and
  TPOT degrade with load the way the profile's roofline says.

Timestamps follow vLLM's definitions: TTFT and e2e from arrival, queue time from entering the
engine's queue to first scheduling, ITL between consecutive outputs of one request, TPOT per request
``(e2e - ttft) / (n - 1)``.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from llmservice_operator.sim.profile import EngineProfile

__all__ = [
    "Arrival",
    "Engine",
    "EngineFaults",
    "FinishReason",
    "KvPolicy",
    "RequestStats",
    "SchedulingPolicy",
    "SimulationResult",
    "StepResult",
    "TokenEvent",
    "simulate",
]

KvPolicy = Literal["preempt", "reserve"]
SchedulingPolicy = Literal["fcfs", "priority"]
FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class EngineFaults:
    """Faults the engine itself models (the HTTP-level ones live in the server)."""

    extra_ttft_s: float = 0.0
    """Each request becomes schedulable this long after it arrives (TTFT grows by as much)."""
    decode_slowdown: float = 1.0
    """Multiplies every decode step's duration."""

    def __post_init__(self) -> None:
        if self.extra_ttft_s < 0:
            raise ValueError(f"extra_ttft_s must be >= 0, got {self.extra_ttft_s}")
        if self.decode_slowdown <= 0:
            raise ValueError(f"decode_slowdown must be > 0, got {self.decode_slowdown}")


@dataclass(slots=True)
class TokenEvent:
    """One output token of one request, produced at the end of a step. (Not frozen: a
    simulation makes millions, and a frozen dataclass costs three times more to build.)"""

    request_id: str
    index: int
    """1-based position among the request's output tokens."""
    time: float
    finish_reason: FinishReason | None
    """Set on the request's last token."""


@dataclass(frozen=True)
class RequestStats:
    """A finished (or aborted) request, with the timestamps vLLM's histograms are built from."""

    request_id: str
    arrival: float
    queued: float
    """When the engine queued it: ``arrival`` plus any injected ``extra_ttft_s``."""
    first_scheduled: float | None
    first_token: float | None
    finished: float
    prompt_tokens: int
    generation_tokens: int
    finish_reason: FinishReason
    num_preemptions: int
    priority: int = 0

    @property
    def e2e(self) -> float:
        return self.finished - self.arrival

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def queue_time(self) -> float:
        """Queued to first scheduled (vLLM's WAITING phase; excludes time before queueing)."""
        scheduled = self.first_scheduled if self.first_scheduled is not None else self.finished
        return max(0.0, scheduled - self.queued)

    @property
    def tpot(self) -> float:
        """Mean time per output token after the first; 0 for one token or fewer (as vLLM)."""
        if self.first_token is None or self.generation_tokens <= 1:
            return 0.0
        return (self.finished - self.first_token) / (self.generation_tokens - 1)


@dataclass(frozen=True)
class StepResult:
    """What one engine step did. Everything in it happens at ``end``."""

    start: float
    end: float
    prefill_tokens: int
    decode_batch: int
    context_tokens: int
    tokens: tuple[TokenEvent, ...]
    finished: tuple[RequestStats, ...]
    preempted: tuple[str, ...]
    first_token_prompt_tokens: int
    """Prompt tokens of the requests whose first token this step produced (what vLLM adds to
    ``vllm:prompt_tokens_total``)."""
    inter_token_latencies: tuple[float, ...]

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class _Seq:
    request_id: str
    arrival: float
    eligible_at: float
    prompt_tokens: int
    output_tokens: int
    end_reason: FinishReason
    priority: int = 0
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    preemptions: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.generated

    def stats(self, finished: float, reason: FinishReason) -> RequestStats:
        return RequestStats(
            request_id=self.request_id,
            arrival=self.arrival,
            queued=self.eligible_at,
            first_scheduled=self.first_scheduled,
            first_token=self.first_token,
            finished=finished,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generated,
            finish_reason=reason,
            num_preemptions=self.preemptions,
            priority=self.priority,
        )

    def order(self) -> tuple[int, float]:
        """vLLM's priority order: lower priority value first, then earlier arrival."""
        return (self.priority, self.arrival)


class Engine:
    """The scheduler and KV pool of one simulated vLLM engine."""

    def __init__(
        self,
        profile: EngineProfile,
        faults: EngineFaults | None = None,
        kv_policy: KvPolicy = "preempt",
        scheduling_policy: SchedulingPolicy = "fcfs",
    ) -> None:
        self.profile = profile
        self.faults = faults or EngineFaults()
        self.kv_policy: KvPolicy = kv_policy
        self.scheduling_policy: SchedulingPolicy = scheduling_policy
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._ids: set[str] = set()
        self._free_blocks = profile.num_blocks
        self.num_preemptions = 0

    # -- observation -------------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use (``vllm:kv_cache_usage_perc``)."""
        total = self.profile.num_blocks
        return (total - self._free_blocks) / total

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def next_wakeup(self, now: float) -> float | None:
        """When calling :meth:`step` can next do something: ``now``, later, or never (None)."""
        if self._running:
            return now
        if self._waiting:
            return max(now, self._waiting[0].eligible_at)
        return None

    # -- requests ----------------------------------------------------------------------------

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.profile.block_size)

    def validate(self, prompt_tokens: int, output_tokens: int) -> None:
        """Raise ValueError when a request cannot be served (vLLM answers 400 for these)."""
        if prompt_tokens < 1:
            raise ValueError("the prompt must hold at least one token")
        if output_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        limit = self.profile.max_model_len
        if prompt_tokens + output_tokens > limit:
            raise ValueError(
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the "
                f"messages, {output_tokens} in the completion)."
            )

    def add_request(
        self,
        request_id: str,
        prompt_tokens: int,
        output_tokens: int,
        now: float,
        end_reason: FinishReason = "length",
        priority: int = 0,
    ) -> None:
        """Queue a request that will produce exactly ``output_tokens`` tokens.

        ``end_reason`` is what its last token reports ("length" when max_tokens cut it off,
        "stop" when the simulated model chose to stop there). ``priority`` orders it under the
        priority policy (lower first) and is ignored under fcfs.
        """
        if request_id in self._ids:
            raise ValueError(f"duplicate request id {request_id!r}")
        self.validate(prompt_tokens, output_tokens)
        self._ids.add(request_id)
        self._enqueue(
            _Seq(
                request_id=request_id,
                arrival=now,
                eligible_at=now + self.faults.extra_ttft_s,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                end_reason=end_reason,
                priority=priority,
            )
        )

    def _enqueue(self, seq: _Seq) -> None:
        if self.scheduling_policy == "priority":
            bisect.insort_right(self._waiting, seq, key=_Seq.order)
        else:
            self._waiting.append(seq)

    def abort(self, request_id: str, now: float) -> RequestStats | None:
        """Drop a request (the client went away); None when it is unknown or already done."""
        for seq in self._waiting:
            if seq.request_id == request_id:
                self._waiting.remove(seq)
                break
        else:
            for seq in self._running:
                if seq.request_id == request_id:
                    self._running.remove(seq)
                    break
            else:
                return None
        self._release(seq)
        self._ids.discard(request_id)
        return seq.stats(now, "abort")

    # -- stepping ----------------------------------------------------------------------------

    def step(self, now: float) -> StepResult | None:
        """Schedule and run one step starting at ``now``; None when nothing can run."""
        # The hot loop of every simulation: attribute lookups are hoisted and the block
        # arithmetic inlined (blocks_for, _allocate); the results are the same to the bit.
        budget = self.profile.max_num_batched_tokens
        block_size = self.profile.block_size
        running = self._running
        scheduled: list[tuple[_Seq, int]] = []
        preempted: list[str] = []

        index = 0
        while index < len(running) and budget > 0:
            seq = running[index]
            computed = seq.computed
            num_new = min(seq.prompt_tokens + seq.generated - computed, budget)
            need = -(-(computed + num_new) // block_size) - seq.blocks
            stalled = False
            while need > self._free_blocks:
                victim = self._victim()
                if running.index(victim) < index:
                    index -= 1
                for position, (done, tokens) in enumerate(scheduled):
                    if done is victim:  # scheduled earlier this step: its tokens come back
                        budget += tokens
                        del scheduled[position]
                        break
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is seq:
                    stalled = True
                    break
            if stalled:
                if self.scheduling_policy == "priority":
                    continue  # the ones after it rank higher and may fit in what it freed
                break
            if need > 0:
                self._free_blocks -= need
                seq.blocks += need
            scheduled.append((seq, num_new))
            budget -= num_new
            index += 1

        if not preempted:
            waiting = self._waiting
            max_num_seqs = self.profile.max_num_seqs
            reserve = self.kv_policy == "reserve"
            while (
                waiting
                and budget > 0
                and len(running) < max_num_seqs
                and waiting[0].eligible_at <= now
            ):
                seq = waiting[0]
                num_new = min(seq.prompt_tokens + seq.generated - seq.computed, budget)
                if reserve:
                    need = self.blocks_for(seq.prompt_tokens + seq.output_tokens)
                else:
                    need = self.blocks_for(num_new)
                if need > self._free_blocks:
                    break
                waiting.popleft()
                self._allocate(seq, need)
                running.append(seq)
                if seq.first_scheduled is None:
                    seq.first_scheduled = now
                scheduled.append((seq, num_new))
                budget -= num_new

        if not scheduled:
            return None
        return self._run(now, scheduled, preempted)

    def _run(
        self, now: float, scheduled: Sequence[tuple[_Seq, int]], preempted: Sequence[str]
    ) -> StepResult:
        prefill_tokens = 0
        decode_batch = 0
        context_tokens = 0
        for seq, num_new in scheduled:
            total = seq.prompt_tokens + seq.generated
            if seq.generated > 0 and seq.computed == total - 1:
                decode_batch += 1
                context_tokens += total
            else:
                prefill_tokens += num_new
        duration_ms = self.profile.prefill_ms(prefill_tokens) + (
            self.profile.decode_step_ms(decode_batch, context_tokens) * self.faults.decode_slowdown
            if decode_batch
            else 0.0
        )
        end = now + max(duration_ms, 0.0) / 1000.0

        tokens: list[TokenEvent] = []
        finished: list[RequestStats] = []
        itls: list[float] = []
        first_prompt_tokens = 0
        for seq, num_new in scheduled:
            computed = seq.computed + num_new
            seq.computed = computed
            if computed < seq.prompt_tokens + seq.generated:
                continue  # a prompt chunk; the prompt is not complete yet
            generated = seq.generated + 1
            seq.generated = generated
            if seq.first_token is None:
                seq.first_token = end
                first_prompt_tokens += seq.prompt_tokens
            elif seq.last_token is not None:
                itls.append(end - seq.last_token)
            seq.last_token = end
            if generated >= seq.output_tokens:
                tokens.append(TokenEvent(seq.request_id, generated, end, seq.end_reason))
                self._running.remove(seq)
                self._release(seq)
                self._ids.discard(seq.request_id)
                finished.append(seq.stats(end, seq.end_reason))
            else:
                tokens.append(TokenEvent(seq.request_id, generated, end, None))
        return StepResult(
            start=now,
            end=end,
            prefill_tokens=prefill_tokens,
            decode_batch=decode_batch,
            context_tokens=context_tokens,
            tokens=tuple(tokens),
            finished=tuple(finished),
            preempted=tuple(preempted),
            first_token_prompt_tokens=first_prompt_tokens,
            inter_token_latencies=tuple(itls),
        )

    def _allocate(self, seq: _Seq, blocks: int) -> None:
        if blocks > 0:
            self._free_blocks -= blocks
            seq.blocks += blocks

    def _release(self, seq: _Seq) -> None:
        self._free_blocks += seq.blocks
        seq.blocks = 0

    def _victim(self) -> _Seq:
        """Whom a KV shortage evicts: the newest (fcfs) or the lowest-ranked (priority)."""
        if self.scheduling_policy == "priority":
            return max(self._running, key=_Seq.order)
        return self._running[-1]

    def _preempt(self, seq: _Seq) -> None:
        self._running.remove(seq)
        self._release(seq)
        seq.computed = 0
        seq.preemptions += 1
        self.num_preemptions += 1
        if self.scheduling_policy == "priority":
            self._enqueue(seq)
        else:
            self._waiting.appendleft(seq)


@dataclass(frozen=True)
class Arrival:
    """One request of an offline simulation."""

    time: float
    prompt_tokens: int
    output_tokens: int
    request_id: str = ""
    priority: int = 0


@dataclass(frozen=True)
class Sample:
    """Engine state right after a step."""

    time: float
    running: int
    waiting: int
    kv_usage: float


@dataclass
class SimulationResult:
    requests: list[RequestStats] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    steps: int = 0
    num_preemptions: int = 0

    def max_running(self) -> int:
        return max((s.running for s in self.samples), default=0)

    def max_waiting(self) -> int:
        return max((s.waiting for s in self.samples), default=0)


def simulate(
    profile: EngineProfile,
    arrivals: Iterable[Arrival],
    faults: EngineFaults | None = None,
    kv_policy: KvPolicy = "preempt",
    max_steps: int = 10_000_000,
    scheduling_policy: SchedulingPolicy = "fcfs",
) -> SimulationResult:
    """Run ``arrivals`` through a fresh engine in virtual time (as fast as the CPU allows)."""
    engine = Engine(profile, faults, kv_policy, scheduling_policy)
    pending = deque(sorted(arrivals, key=lambda a: a.time))
    result = SimulationResult()
    now = pending[0].time if pending else 0.0
    counter = 0
    while pending or engine.has_work():
        while pending and pending[0].time <= now:
            arrival = pending.popleft()
            counter += 1
            engine.add_request(
                arrival.request_id or f"req-{counter}",
                arrival.prompt_tokens,
                arrival.output_tokens,
                arrival.time,
                priority=arrival.priority,
            )
        step = engine.step(now)
        if step is None:
            candidates = [pending[0].time] if pending else []
            wake = engine.next_wakeup(now)
            if wake is not None and wake > now:
                candidates.append(wake)
            if not candidates:
                raise RuntimeError("the engine is stuck: work is queued but nothing can run")
            now = min(candidates)
            continue
        result.steps += 1
        if result.steps > max_steps:
            raise RuntimeError(f"simulation exceeded {max_steps} steps")
        result.requests.extend(step.finished)
        now = step.end
        result.samples.append(Sample(now, engine.num_running, engine.num_waiting, engine.kv_usage))
    result.num_preemptions = engine.num_preemptions
    return result
