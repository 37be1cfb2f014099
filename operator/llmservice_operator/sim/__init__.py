"""`llmservice sim`: a vLLM engine simulator for tests and rehearsals where no GPU exists.

`engine` and `profile` are pure (no clock, no I/O); `server` runs them behind vLLM's HTTP API.
"""
