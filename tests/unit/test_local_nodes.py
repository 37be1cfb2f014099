"""The local cluster's fake nodes: every node gets its own loopback pod CIDR, the benchmark's
hundreds of nodes too, none inside the fallback range kwok gives other nodes' pods."""

from __future__ import annotations

import ipaddress

from llmservice_dev.localcluster.nodes import POD_FALLBACK_CIDR, pod_cidr


def test_pod_cidrs_are_distinct_loopback_24s_outside_the_fallback_range() -> None:
    networks = [ipaddress.IPv4Network(pod_cidr(i)) for i in range(600)]
    assert len(set(networks)) == 600
    fallback = ipaddress.IPv4Network(POD_FALLBACK_CIDR)
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    for network in networks:
        assert network.prefixlen == 24 and network.subnet_of(loopback)
        assert not network.overlaps(fallback)
    assert [pod_cidr(0), pod_cidr(254), pod_cidr(255)] == [
        "127.1.1.0/24", "127.1.255.0/24", "127.3.0.0/24"]  # fmt: skip
