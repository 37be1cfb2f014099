"""benchmarks.calibration's fit: the simulator's two speed knobs from the real engine's
batch-1 answers (the run itself needs the engine; this is its arithmetic)."""

from __future__ import annotations

import pytest
from benchmarks.calibration import Batch1, Load, Speed, fit, median, profile_times

LOAD = Load(rate=3.0, duration_s=30.0, prompt_tokens=128, output_tokens=64, seed=1)
NO_OVERHEAD = Batch1(0.0, 0.0)


def simulated(speed: Speed, overhead: Batch1 = NO_OVERHEAD) -> Batch1:
    """What the simulator answers at batch 1 at ``speed``: its profile's times, scaled, plus a
    per-request overhead of its own that does not scale."""
    prefill_s, decode_s = profile_times(LOAD)
    return Batch1(
        prefill_s / speed.time_scale + overhead.ttft_s,
        decode_s * speed.decode_slowdown / speed.time_scale + overhead.tpot_s,
    )


def test_the_first_fit_matches_the_profile_to_the_real_engine() -> None:
    real = Batch1(ttft_s=0.0109, tpot_s=0.0019)
    speed = fit(real, LOAD)
    assert speed.time_scale == pytest.approx(profile_times(LOAD)[0] / 0.0109)
    answered = simulated(speed)
    assert answered.ttft_s == pytest.approx(real.ttft_s)
    assert answered.tpot_s == pytest.approx(real.tpot_s)


def test_the_second_fit_takes_the_simulators_own_overhead_off() -> None:
    real = Batch1(ttft_s=0.0109, tpot_s=0.0019)
    overhead = Batch1(ttft_s=0.0026, tpot_s=0.0001)
    first = fit(real, LOAD)
    assert simulated(first, overhead).ttft_s == pytest.approx(0.0135)  # 24% over
    second = fit(real, LOAD, (first, simulated(first, overhead)))
    answered = simulated(second, overhead)
    assert answered.ttft_s == pytest.approx(real.ttft_s)
    assert answered.tpot_s == pytest.approx(real.tpot_s)


def test_an_overhead_above_the_real_latency_cannot_be_fitted() -> None:
    real = Batch1(ttft_s=0.002, tpot_s=0.0019)
    first = fit(real, LOAD)
    with pytest.raises(RuntimeError, match="overhead alone"):
        fit(real, LOAD, (first, simulated(first, Batch1(0.003, 0.0))))


def test_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
