"""The pilothouse process of the kill test: run as its own process.

``start DB BUS N`` starts N conversations that each call the event tool
``lookup_order`` (so each waits ``WA`` with a command in the outbox), prints
``{"started": N}``, then relays and applies completions until killed.
``serve DB BUS`` is the restarted process: it only relays and applies.
``actions DB BUS TOPIC`` answers ``run_action`` on TOPIC with the plain
action of ``action_models`` (its model never answers when
``EVENT_MODEL_HANG`` is set: the test kills the process mid-call); it
prints ``{"ready": true}`` once it consumes.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path

import anyio

from pilothouse.api import Pilothouse
from pilothouse.events import Bus, EventService, open_bus
from pilothouse.settings import Settings

# The shared catalog lives beside the unit tests (tests/events), on no
# import path of its own: loaded by name once the path is set.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "events"))
_shared = importlib.import_module("event_catalog")
CATALOG: str = _shared.CATALOG
order_model = _shared.order_model


async def actions(url: str, bus: Bus, topic: str) -> None:
    """Answer ``run_action`` on ``topic`` until killed."""
    from action_models import echo_model

    hang = bool(os.environ.get("EVENT_MODEL_HANG"))
    async with Pilothouse(Settings(database_url=url), model=echo_model(hang=hang)) as ph:
        service = EventService(ph, bus, action_topic=topic, sweep_interval=0.5)
        try:
            async with anyio.create_task_group() as group:
                await group.start(service.run)
                print(json.dumps({"ready": True}), flush=True)
        finally:
            await bus.close()


async def main(command: str, url: str, bus_url: str, count: str) -> None:
    log_file = os.environ.get("EVENT_PROCESS_LOG")
    if log_file:
        # The test prints this file when the process did not finish in time:
        # the consumer group's joins and the service's warnings, with times.
        logging.basicConfig(
            filename=log_file,
            level=logging.INFO,
            format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
        )
    settings = Settings(database_url=url)
    # 6 s, as the test's own consumers (bus_of): with 2 s, the rest of the
    # suite on both cores delayed heartbeats past the session, and the
    # restarted process's group kept rebalancing (CI: nothing applied in 240 s).
    bus = (
        open_bus(bus_url, session_timeout=6.0)
        if bus_url.startswith("kafka")
        else open_bus(bus_url, ack_wait=5.0)
    )
    if command == "actions":
        await actions(url, bus, count)
        return
    async with Pilothouse(settings, model=order_model()) as ph:
        if command == "start":
            await ph.catalog.import_text(CATALOG)
            for index in range(int(count)):
                await ph.command.start_and_send(f"K-{index}", action="ORDERS")
            print(json.dumps({"started": int(count)}), flush=True)
        service = EventService(ph, bus, sweep_interval=1.0, recover_after=3.0)
        try:
            await service.run()
        finally:
            await bus.close()


if __name__ == "__main__":
    anyio.run(
        main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "0"
    )
