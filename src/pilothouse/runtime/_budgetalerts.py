"""Budget alerts delivered to a webhook or published on a bus, once per threshold per period.

The gate announces a threshold once per period (the process whose claim
changes the ledger row, see :mod:`pilothouse.runtime._budgets`); each such
announcement is also POSTed here as JSON. The request goes through the
pinned transport of the egress policy (when the deployment has one), so a
webhook on a private address is refused like any other call the service
makes, unless the policy allows it for the tenant whose turn crossed it.

On a bus (``PILOTHOUSE_BUDGET_ALERT_BUS``: ``kafka://`` or ``nats://``, the
broker the operator runs, like the events bus) each alert is one JSON
message on ``PILOTHOUSE_BUDGET_ALERT_TOPIC``, keyed by tenant.

A failed delivery is logged, counted nowhere else and not retried: the
alert stays on the turn's timeline, in the log and on ``/metrics``.
"""

from __future__ import annotations

__all__ = ["AlertBus", "AlertNotifier", "AlertWebhook"]

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

if TYPE_CHECKING:
    from pilothouse.events import Bus
    from pilothouse.providers._egress import EgressPolicy

logger = logging.getLogger(__name__)

_TIMEOUT = httpx.Timeout(5.0)


def _shown(url: str) -> str:
    """The URL without credentials or query (what the log may show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class AlertWebhook:
    """POSTs each budget alert as JSON to one URL.

    Args:
        url: the ``http(s)`` URL (``Settings.budget_alert_webhook``).
        egress: the deployment's egress policy, or None where addresses are
            not checked (the operator's own process).
    """

    def __init__(self, url: str, egress: EgressPolicy | None) -> None:
        self.url = url
        self._egress = egress
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            transport: httpx.AsyncBaseTransport | None = None
            if self._egress is not None:
                from pilothouse.providers._egress_transport import PinnedHttpxTransport

                transport = PinnedHttpxTransport(self._egress)
            self._client = httpx.AsyncClient(
                timeout=_TIMEOUT, follow_redirects=False, transport=transport
            )
        return self._client

    async def send(self, alert: dict[str, Any]) -> bool:
        """Deliver one alert; say whether the receiver took it (a 2xx answer)."""
        try:
            response = await self._http().post(self.url, json=alert)
        except httpx.HTTPError as error:
            # Refused by the egress policy, or the receiver cannot be reached.
            logger.warning(
                "budget alert for %s was not delivered to %s: %s",
                alert.get("budget"),
                _shown(self.url),
                error or type(error).__name__,
            )
            return False
        if not response.is_success:
            logger.warning(
                "budget alert for %s was refused by %s: HTTP %d",
                alert.get("budget"),
                _shown(self.url),
                response.status_code,
            )
            return False
        return True

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class AlertNotifier(Protocol):
    """Somewhere budget alerts go besides the timeline, the log and the metrics."""

    async def send(self, alert: dict[str, Any]) -> bool:
        """Deliver one alert; say whether it was taken."""
        ...

    async def aclose(self) -> None:
        """Release what delivering holds."""
        ...


class AlertBus:
    """Publishes each budget alert as a JSON message on a bus topic, keyed by tenant.

    Args:
        url: the bus (``Settings.budget_alert_bus``).
        topic: the topic (``Settings.budget_alert_topic``).
    """

    def __init__(self, url: str, topic: str) -> None:
        self.url = url
        self.topic = topic
        self._bus: Bus | None = None

    async def send(self, alert: dict[str, Any]) -> bool:
        """Publish one alert; say whether the broker took it."""
        from pilothouse.events import BusError, open_bus
        from pilothouse.events._bus import shown_url

        try:
            if self._bus is None:
                bus = open_bus(self.url)
                await bus.start()
                self._bus = bus
            await self._bus.publish(
                self.topic,
                json.dumps(alert, separators=(",", ":")).encode(),
                key=str(alert.get("tenant")),
            )
        except (BusError, OSError) as error:
            logger.warning(
                "budget alert for %s was not published on %s (%s): %s",
                alert.get("budget"),
                shown_url(self.url),
                self.topic,
                error or type(error).__name__,
            )
            return False
        return True

    async def aclose(self) -> None:
        """Disconnect from the bus."""
        if self._bus is not None:
            await self._bus.close()
            self._bus = None
