"""Every gauge says how processes add up under the Prometheus client's multiprocess mode.

With ``PROMETHEUS_MULTIPROC_DIR`` set (``pilothouse serve --workers N`` sets
it; an operator may set it for every process of a container) a gauge left
in the client's default mode (``all``) keeps one series per process, dead
ones included, so a level like a consumer lag would be reported again by
every process that ever ran. Counters and histograms add up by themselves.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Gauge

from pilothouse.events._service import EventServiceMetrics
from pilothouse.events._worker import WorkerMetrics
from pilothouse.server._metrics import Metrics


def _gauges(metrics: Any) -> list[Gauge]:
    return [value for value in vars(metrics).values() if isinstance(value, Gauge)]


def test_every_gauge_is_the_highest_of_the_live_processes() -> None:
    gauges = _gauges(EventServiceMetrics.create()) + _gauges(WorkerMetrics.create())
    assert gauges
    for gauge in gauges + _gauges(Metrics()):
        assert gauge._multiprocess_mode == "livemax", gauge._name
