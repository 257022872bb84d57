"""The environment each benchmark child process starts with."""

from __future__ import annotations

import os

MOCK_KEY = {
    "BENCH_MOCK_API_KEY": "x",
    # A tenant's @secrets(NAME) reads only the variables the operator maps to it.
    "PILOTHOUSE_SECRETS_ENV": '{"*": ["BENCH_MOCK_API_KEY"]}',
}
"""The benchmark catalogs' provider key, given to every tenant as an operator would."""


def child_env(**extra: str) -> dict[str, str]:
    """Return this process's environment less every ``PILOTHOUSE_*`` variable, plus ``extra``.

    A pilothouse setting left in the shell that runs the benchmark
    (``PILOTHOUSE_FREEZE_HEAP``, ``PILOTHOUSE_FAST_EXIT``, a database URL,
    pool sizes) would change what is measured without the results saying
    so. Each contender sets what it needs itself: in its ``Settings``, or
    here through ``extra`` for the served one.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("PILOTHOUSE_")}
    env.update(extra)
    return env
