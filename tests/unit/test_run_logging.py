"""`llmservice run`'s logging: kopf's line per handled event is left out unless debugging."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from llmservice_operator.commands.run import _configure_logging
from llmservice_operator.settings import OperatorSettings


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("kopf.objects").setLevel(logging.NOTSET)


@pytest.mark.usefixtures("restored_logging")
def test_kopfs_per_event_lines_are_left_out_below_debug_and_its_warnings_kept() -> None:
    _configure_logging(OperatorSettings(log_level="INFO"))
    kopf_objects = logging.getLogger("kopf.objects")
    assert not kopf_objects.isEnabledFor(logging.INFO)  # "Handler ... succeeded."
    assert kopf_objects.isEnabledFor(logging.WARNING)
    assert logging.getLogger("llmservice_operator.handlers").isEnabledFor(logging.INFO)
    _configure_logging(OperatorSettings(log_level="DEBUG"))
    assert kopf_objects.isEnabledFor(logging.DEBUG)
