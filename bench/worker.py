"""One contender in its own process, driven by the harness over stdin/stdout.

Started as ``python bench/worker.py '<json options>'``. It builds the
contender, makes the first call (cold start: import + setup + first call,
timed from the top of this file), then answers one JSON command per stdin
line with one JSON line on stdout:

- ``{"op": "round", "n": N}``: N calls one after the other; replies with the
  per-call latencies, the facts each call returned, the process CPU seconds
  the round used (``time.process_time()``, all threads), and the errors;
- ``{"op": "profile", "n": N, "out": path}``: N calls under cProfile, stats
  written to ``path``; replies with the top functions by own time;
- ``{"op": "quit"}``.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()
C0 = time.process_time()

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402


def _send(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def _round(contender: Any, n: int) -> dict[str, Any]:
    latencies: list[float] = []
    facts: list[dict[str, Any]] = []
    errors: list[str] = []
    cpu = time.process_time()
    # A served contender measures its server's CPU; this process is then the client.
    server_cpu = getattr(contender, "cpu", None)
    server = server_cpu() if server_cpu else None
    wall = time.perf_counter()
    for _ in range(n):
        start = time.perf_counter()
        try:
            fact = await contender.call()
        except Exception as exc:  # a contender's failure is a result, reported
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        latencies.append((time.perf_counter() - start) * 1000)
        facts.append({k: v for k, v in fact.items() if k != "text"})
    wall = time.perf_counter() - wall
    client = time.process_time() - cpu
    return {
        "lat_ms": latencies,
        "facts": facts,
        "cpu_s": server_cpu() - server if server_cpu and server is not None else client,
        "wall_s": wall,
        "errors": errors,
        **({"client_cpu_s": client} if server_cpu else {}),
    }


async def _profile(contender: Any, n: int, out: str) -> dict[str, Any]:
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        await contender.call()
    profiler.disable()
    profiler.dump_stats(out)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(25)
    by_cum = io.StringIO()
    pstats.Stats(profiler, stream=by_cum).sort_stats("cumulative").print_stats(40)
    return {"tottime": text.getvalue(), "cumulative": by_cum.getvalue()}


async def main() -> None:
    """Build the contender, make the first call, then obey the harness."""
    options = json.loads(sys.argv[1])
    sys.path.insert(0, options["bench_dir"])
    import contenders

    if options["scenario"].startswith(("conc-", "stream-")):  # scenario 2; 3 at concurrency
        import concurrency

        await concurrency.worker(options, _send, T0, C0)
        return

    contender = await contenders.make(
        options["contender"], options["base_url"], options["scenario"], options
    )
    setup_s = time.perf_counter() - T0
    first_error = None
    try:
        await contender.call()
    except Exception as exc:
        first_error = f"{type(exc).__name__}: {exc}"[:2000] + "\n" + traceback.format_exc()[-3000:]
    _send(
        {
            "ready": True,
            "import_setup_ms": setup_s * 1000,
            "cold_ms": (time.perf_counter() - T0) * 1000,
            "cold_cpu_ms": (time.process_time() - C0) * 1000,
            "first_error": first_error,
        }
    )
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "round":
            _send(await _round(contender, command["n"]))
        elif command["op"] == "profile":
            _send(await _profile(contender, command["n"], command["out"]))
        else:
            break
    await contender.aclose()


if __name__ == "__main__":
    asyncio.run(main())
