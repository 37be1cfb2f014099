"""A wave of new services: WAVE_SERVICES within WAVE_WINDOW_S, over once QUIET_S pass
without another."""

from __future__ import annotations

from llmservice_operator.arrivals import QUIET_S, WAVE_SERVICES, WAVE_WINDOW_S, Wave


def _wave() -> tuple[Wave, list[float]]:
    now = [1000.0]
    return Wave(clock=lambda: now[0]), now


def test_a_wave_begins_with_its_fiftieth_service_within_ten_seconds_and_ends_when_quiet() -> None:
    wave, now = _wave()
    for _ in range(WAVE_SERVICES - 1):
        wave.arrived()
        now[0] += 0.1
        assert not wave.active()
    wave.arrived()
    assert wave.active()
    assert wave.remaining_s() == QUIET_S
    now[0] += QUIET_S - 0.01
    assert wave.active()
    now[0] += 0.02
    assert not wave.active() and wave.remaining_s() == 0.0


def test_services_coming_one_by_one_are_never_a_wave() -> None:
    wave, now = _wave()
    gap = WAVE_WINDOW_S / (WAVE_SERVICES - 1) + 0.01  # 49 at most in any window
    for _ in range(500):
        wave.arrived()
        assert not wave.active()
        now[0] += gap
    assert len(wave.arrivals) < WAVE_SERVICES  # the window forgets older ones


def test_every_service_of_a_wave_extends_it() -> None:
    wave, now = _wave()
    for _ in range(WAVE_SERVICES):
        wave.arrived()
    for _ in range(20):  # one every 4 s: far fewer than a wave's rate, but the wave goes on
        now[0] += QUIET_S - 1
        assert wave.active()
        wave.arrived()
    now[0] += QUIET_S
    assert not wave.active()
