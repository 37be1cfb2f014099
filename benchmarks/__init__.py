"""Benchmarks run with one command each (``make bench``); they print figures, never assert."""
