"""The leader election's durations (lease_timing.py), the settings and the chart's wiring."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from llmservice_operator.lease_timing import LeaseTiming
from llmservice_operator.settings import OperatorSettings

CHART = Path(__file__).parents[2] / "charts" / "llmservice-operator"
TIMING = LeaseTiming(15.0, 10.0, 2.0)


def test_the_renew_deadline_is_shorter_than_the_lease() -> None:
    assert TIMING.renew_deadline_s < TIMING.lease_duration_s
    for lease, deadline, retry in [
        (15, 15, 2),
        (15, 16, 2),
        (15.9, 15, 2),
        (15, 10, 9),
        (15, 10, 0),
    ]:
        with pytest.raises(ValueError, match="must be"):
            LeaseTiming(lease, deadline, retry)
    assert LeaseTiming.for_lease(15.0) == LeaseTiming(15.0, 10.0, 2.0)
    assert LeaseTiming.for_lease(6.0) == LeaseTiming(6.0, 4.0, 0.8)  # the integration tests'


def test_settings_refuse_a_renew_deadline_not_shorter_than_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMSERVICE_LEASE_DURATION_SECONDS", "15")
    monkeypatch.setenv("LLMSERVICE_LEASE_RENEW_DEADLINE_SECONDS", "15")
    with pytest.raises(ValueError, match="renewDeadline"):
        OperatorSettings()
    monkeypatch.setenv("LLMSERVICE_LEASE_RENEW_DEADLINE_SECONDS", "12")
    monkeypatch.setenv("LLMSERVICE_LEASE_RETRY_PERIOD_SECONDS", "3")
    assert OperatorSettings().lease_timing == LeaseTiming(15.0, 12.0, 3.0)
    monkeypatch.delenv("LLMSERVICE_LEASE_RENEW_DEADLINE_SECONDS")
    monkeypatch.delenv("LLMSERVICE_LEASE_RETRY_PERIOD_SECONDS")
    monkeypatch.setenv("LLMSERVICE_LEASE_DURATION_SECONDS", "6")
    assert OperatorSettings().lease_timing == LeaseTiming(6.0, 4.0, 0.8)


def test_the_chart_passes_each_lease_duration_to_a_setting() -> None:
    """Empty renewDeadlineSeconds/retryPeriodSeconds render no variable (the settings derive
    them from the lease), so an install that sets only the lease (the tests' 6 s) still starts."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["leaderElection"]
    assert values["renewDeadlineSeconds"] == "" and values["retryPeriodSeconds"] == ""
    template = (CHART / "templates" / "deployment.yaml").read_text()
    wired = {
        name: value
        for name, value in re.findall(
            r"name: (LLMSERVICE_LEASE_\w+), value: \{\{ ([^}]*)\}\}", template
        )
    }
    assert wired["LLMSERVICE_LEASE_DURATION_SECONDS"].startswith(
        ".Values.leaderElection.leaseDurationSeconds"
    )
    for name, key in [
        ("LLMSERVICE_LEASE_RENEW_DEADLINE_SECONDS", "renewDeadlineSeconds"),
        ("LLMSERVICE_LEASE_RETRY_PERIOD_SECONDS", "retryPeriodSeconds"),
    ]:
        assert f"with .Values.leaderElection.{key} }}}}\n        - {{name: {name}," in template
    for name in [*wired, "LLMSERVICE_LEASE_RENEW_DEADLINE_SECONDS"]:
        assert name.removeprefix("LLMSERVICE_").lower() in OperatorSettings.model_fields, name
