"""Every Kubernetes API call the operator makes has a timeout (adapters/kube.py): a hung API
server (it accepts the connection and never answers) fails the call in seconds, instead of
holding a reconcile worker for ever; a watch keeps a long timeout of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

from llmservice_operator.adapters.informer import WATCH_REQUEST_TIMEOUT, RawWatcher
from llmservice_operator.adapters.kube import API_READ_TIMEOUT_S, TimedApiClient, load_kube_config

from .rawhttp import RawServer, serving, silent

#: urllib3 tries a GET that timed out 3 more times: 4 reads of 0.3 s, and a busy machine.
BOUND_S = 8.0


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    yield from serving()


def _hung_api(serve: Callable[..., RawServer]) -> TimedApiClient:
    configuration = client.Configuration()
    configuration.host = serve(silent).url
    return TimedApiClient((0.3, 0.3), configuration)


def _ends_in_time(call: Callable[[], Any]) -> BaseException | None:
    """The error ``call`` ended with (None: it returned), or a failed test if it is still
    waiting after BOUND_S."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            outcome.append(err)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), f"still waiting for the API server after {BOUND_S} s"
    assert time.monotonic() - started < BOUND_S
    return outcome[0]


def test_a_typed_api_call_to_a_hung_api_server_times_out(
    serve: Callable[..., RawServer],
) -> None:
    api = client.CoreV1Api(_hung_api(serve))
    error = _ends_in_time(lambda: api.read_namespaced_secret("s", "ns"))
    assert error is not None and "timed out" in str(error).lower()


def test_the_dynamic_clients_discovery_from_a_hung_api_server_times_out(
    serve: Callable[..., RawServer],
) -> None:
    api_client = _hung_api(serve)
    error = _ends_in_time(lambda: DynamicClient(api_client))  # type: ignore[no-untyped-call]
    assert error is not None and "timed out" in str(error).lower()


class Recorded(Exception):
    """Stops a call at the transport, with the timeout it was given."""


def _recording_transport(api_client: TimedApiClient) -> None:
    def request(*_: Any, _request_timeout: Any = None, **__: Any) -> Any:
        raise Recorded(_request_timeout)

    api_client.rest_client.request = request


def test_a_call_without_a_timeout_gets_the_default_and_one_with_keeps_its_own() -> None:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:1"
    api_client = TimedApiClient((4.0, 30.0), configuration)
    _recording_transport(api_client)
    api = client.CoreV1Api(api_client)
    with pytest.raises(Recorded) as default:
        api.read_namespaced_secret("s", "ns")
    assert default.value.args == ((4.0, 30.0),)
    with pytest.raises(Recorded) as own:
        api.read_namespaced_secret("s", "ns", _request_timeout=(1, 2))
    assert own.value.args == ((1, 2),)


def test_the_operators_client_connects_in_the_settings_time_and_reads_in_30_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "load_incluster_config", lambda: None)  # as in a pod
    api_client = load_kube_config(7.0)
    assert isinstance(api_client, TimedApiClient)
    assert api_client.request_timeout == (7.0, API_READ_TIMEOUT_S) == (7.0, 30.0)


def test_a_watch_has_a_read_timeout_longer_than_the_servers_end_of_it() -> None:
    given: dict[str, Any] = {}

    class Watcher:
        def stream(self, func: Any, **kwargs: Any) -> Iterator[Any]:
            given.update(kwargs)
            return iter(())

    class Resource:
        def get(self, **_: Any) -> Any:
            return None

    RawWatcher().watch(Resource(), namespace="ns", timeout=300, watcher=Watcher())
    assert given["_request_timeout"] == WATCH_REQUEST_TIMEOUT == (10.0, 330.0)
    assert given["timeout_seconds"] == 300
