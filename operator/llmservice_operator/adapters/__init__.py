"""Adapters: the only code that does I/O (Kubernetes, Prometheus, HTTP)."""
