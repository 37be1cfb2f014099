"""Events are posted off the caller's thread, in order, stamped when they were handed over; a
refused one is logged, not raised; the queue is bounded and keeps no whole object alive."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from llmservice_operator.adapters.event_poster import EventPoster
from llmservice_operator.adapters.kube import _event_body
from llmservice_operator.events import Event

BODY = {
    "apiVersion": "serving.llmservice.dev/v1alpha1",
    "kind": "LLMService",
    "metadata": {"namespace": "ml", "name": "chat", "uid": "u1", "labels": {"a": "b"}},
    "spec": {"model": {"id": "m"}},
    "status": {"phase": "Available"},
}
T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


class BlockingPost:
    """Records each post; each waits until ``release`` is set."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.release = threading.Event()
        self.posted: list[tuple[str, str, str]] = []
        self.objects: list[dict[str, Any]] = []
        self.times: list[datetime] = []
        self.threads: set[str] = set()
        self.refuse = refuse or set()

    def __call__(self, obj: dict[str, Any], type_: str, reason: str, message: str,
                 at: datetime) -> None:  # fmt: skip
        self.release.wait(5)
        self.threads.add(threading.current_thread().name)
        if reason in self.refuse:
            raise ApiException(status=403, reason="Forbidden")
        self.posted.append((type_, reason, message))
        self.objects.append(obj)
        self.times.append(at)


def test_post_returns_before_the_events_are_posted_and_they_go_in_order() -> None:
    post = BlockingPost()
    moments = iter([T0, datetime(2026, 12, 4, 9, 5, tzinfo=UTC)])
    poster = EventPoster(post, clock=lambda: next(moments))
    events = [Event("Normal", "Sized", "1x H100"), Event("Warning", "ScalingDegraded", "no data")]
    poster.post(BODY, events)
    assert post.posted == []  # the caller did not wait for the API server
    post.release.set()
    poster.shutdown()  # waits for what was handed over
    assert post.posted == [
        ("Normal", "Sized", "1x H100"),
        ("Warning", "ScalingDegraded", "no data"),
    ]
    assert post.times == [T0, T0]  # stamped when handed over, not when posted
    assert post.threads and threading.current_thread().name not in post.threads


def test_the_queue_holds_only_what_an_event_names() -> None:
    post = BlockingPost()
    post.release.set()
    poster = EventPoster(post, clock=lambda: T0)
    poster.post(BODY, [Event("Normal", "Sized", "a")])
    poster.shutdown()
    [obj] = post.objects
    assert "spec" not in obj and "status" not in obj
    involved = _event_body(obj, "Normal", "Sized", "a", T0)["involvedObject"]
    assert involved == {"apiVersion": "serving.llmservice.dev/v1alpha1", "kind": "LLMService",
                        "name": "chat", "namespace": "ml", "uid": "u1"}  # fmt: skip


def test_a_refused_event_is_logged_and_the_next_is_still_posted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    post = BlockingPost(refuse={"Sized"})
    post.release.set()
    poster = EventPoster(post)
    with caplog.at_level(logging.WARNING):
        poster.post(BODY, [Event("Normal", "Sized", "a"), Event("Normal", "Available", "b")])
        poster.shutdown()
    assert post.posted == [("Normal", "Available", "b")]
    assert "ml/chat: Event Sized not posted" in caplog.text


def test_what_does_not_fit_in_the_queue_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    post = BlockingPost()
    poster = EventPoster(post, max_pending=2)
    with caplog.at_level(logging.WARNING):
        poster.post(BODY, [Event("Normal", reason, "") for reason in ("A", "B", "C", "D")])
    assert "2 Events wait to be posted: C dropped (1 so far)" in caplog.text
    post.release.set()
    for _ in range(500):  # once posted, they make room again
        if len(post.posted) == 2:
            break
        time.sleep(0.01)
    poster.post(BODY, [Event("Normal", "E", "")])
    poster.shutdown()
    assert [reason for _, reason, _ in post.posted] == ["A", "B", "E"]


def test_inline_posts_on_the_callers_thread() -> None:
    post = BlockingPost()
    post.release.set()
    EventPoster(post, inline=True).post(BODY, [Event("Normal", "Sized", "a")])
    assert post.posted == [("Normal", "Sized", "a")]
    assert post.threads == {threading.current_thread().name}
