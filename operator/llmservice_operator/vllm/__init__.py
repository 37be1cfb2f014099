"""Facts about vLLM itself, keyed by vLLM version (metric names; flags later).

Pure modules: no I/O, no clock, no prometheus_client.
"""
