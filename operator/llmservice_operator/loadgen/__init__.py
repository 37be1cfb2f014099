"""`llmservice load`: an open-loop load generator for OpenAI-compatible (vLLM) endpoints.

`distributions`, `schedule` and `report` are pure; `client` sends the requests (asyncio +
aiohttp) to a list of targets that a caller supplies (and may change while the run goes on).
"""
