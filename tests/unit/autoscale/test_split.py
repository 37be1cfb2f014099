"""Sharing the replica total between the stable and candidate revisions of a rollout."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmservice_operator.autoscale import split_replicas


@pytest.mark.parametrize(
    ("total", "weight", "expected", "arithmetic"),
    [
        (10, 0, (10, 0), "no canary traffic: all stable"),
        (10, 10, (9, 1), "ceil(10 x 0.9) = 9, ceil(10 x 0.1) = 1"),
        (10, 25, (8, 3), "ceil(7.5) = 8, ceil(2.5) = 3: both round up, 11 in all"),
        (5, 50, (3, 3), "ceil(2.5) each"),
        (3, 1, (3, 1), "ceil(2.97) = 3 stay; the 1% canary still gets one"),
        (1, 99, (1, 1), "a 1% stable share still needs a replica"),
        (10, 100, (0, 10), "promoted: all on the candidate"),
        (0, 30, (0, 0), "scaled to zero: nothing to share"),
    ],
)
def test_split_worked_examples(
    total: int, weight: int, expected: tuple[int, int], arithmetic: str
) -> None:
    assert split_replicas(total, weight) == expected, arithmetic


@given(st.integers(0, 500), st.integers(0, 100))
def test_split_never_starves_either_side(total: int, weight: int) -> None:
    stable, candidate = split_replicas(total, weight)
    assert stable >= math.ceil(total * (100 - weight) / 100)
    assert candidate >= math.ceil(total * weight / 100)
    assert stable + candidate <= total + 1
    if total and 0 < weight < 100:
        assert stable >= 1 and candidate >= 1


@given(st.integers(0, 200), st.integers(0, 100))
def test_split_moves_both_sides_with_the_total(total: int, weight: int) -> None:
    """Scaled together: more total never means fewer replicas on either side."""
    now, more = split_replicas(total, weight), split_replicas(total + 1, weight)
    assert more[0] >= now[0] and more[1] >= now[1]


@pytest.mark.parametrize(("total", "weight"), [(-1, 10), (3, -1), (3, 101)])
def test_split_rejects_nonsense(total: int, weight: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        split_replicas(total, weight)
