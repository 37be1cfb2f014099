"""The autoscaling benchmark's gateway (benchmarks.fleet.route): how a replica that has just
become ready takes load, which decides what adding replicas during a burst is worth."""

from __future__ import annotations

import random
from dataclasses import dataclass

from benchmarks.fleet import ROUTER_SEED, Router, route


@dataclass
class Replica:
    rid: int
    in_flight: int


def fresh_replica_share(router: Router, busy: int = 10, requests: int = 22) -> list[int]:
    """``busy`` replicas holding 20 requests each and one just Ready holding none; the replica
    each of ``requests`` arrivals (in quick succession, none finishing) goes to."""
    fleet = [Replica(i, 20) for i in range(busy)] + [Replica(busy, 0)]
    draws = random.Random(ROUTER_SEED)
    chosen = []
    for _ in range(requests):
        target = route(fleet, lambda r: (r.in_flight, r.rid), router, draws)
        target.in_flight += 1
        chosen.append(target.rid)
    return chosen


def test_scanning_every_replica_floods_the_fresh_one() -> None:
    """nginx least_conn without slow start: every arrival goes to the fresh replica until it
    holds as many as the others (20), a burst of prefills at once."""
    chosen = fresh_replica_share("least")
    assert chosen[:20] == [10] * 20
    assert 10 not in chosen[21:]


def test_two_random_choices_give_the_fresh_replica_a_share() -> None:
    """Envoy's LEAST_REQUEST: the fresh replica wins only the draws it is part of (about 2 in
    11 here), so its load builds up over many arrivals."""
    chosen = fresh_replica_share("p2c")
    fresh = chosen.count(10)
    assert 1 <= fresh <= 10, chosen
    assert len(set(chosen)) > 3, chosen


def test_two_random_choices_take_the_less_loaded_of_the_pair() -> None:
    fleet = [Replica(0, 5), Replica(1, 3), Replica(2, 9)]
    draws = random.Random(ROUTER_SEED)
    picks = {route(fleet, lambda r: (r.in_flight, r.rid), "p2c", draws).rid for _ in range(50)}
    assert picks == {0, 1}  # the busiest loses whichever pair holds it; the others each win one
    assert route(fleet[:2], lambda r: (r.in_flight, r.rid), "p2c", draws).rid == 1
