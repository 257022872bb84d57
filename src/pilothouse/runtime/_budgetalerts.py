"""Budget alerts delivered to a webhook, once per threshold per period.

The gate announces a threshold once per period (the process whose claim
changes the ledger row, see :mod:`pilothouse.runtime._budgets`); each such
announcement is also POSTed here as JSON. The request goes through the
pinned transport of the egress policy (when the deployment has one), so a
webhook on a private address is refused like any other call the service
makes, unless the policy allows it for the tenant whose turn crossed it.

A failed delivery is logged, counted nowhere else and not retried: the
alert stays on the turn's timeline, in the log and on ``/metrics``.
"""

from __future__ import annotations

__all__ = ["AlertWebhook"]

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx

if TYPE_CHECKING:
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
