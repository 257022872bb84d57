"""Searches of tenants' regular expressions under one time bound.

Tenants write regular expressions that the server searches in its own
process: a content filter's ``blocked_patterns``, an evaluation's ``regex:``
scorers, a JSON Schema's ``pattern`` and ``patternProperties``. The standard
library's ``re`` has no time limit, and a pattern that backtracks without end
(``(a|aa)+$`` on a long run of ``a``) would hold the process, and every
tenant's turns, for as long as it runs. Each of those searches goes through
here: the ``regex`` package (which reads ``re``'s syntax) with a timeout.

This module imports no schema library: the content filter uses it on every
turn.
"""

from __future__ import annotations

__all__ = [
    "REWRITE_SLOW_PATTERN",
    "SEARCH_SECONDS",
    "PatternTimeout",
    "bounded_search",
    "compile_pattern",
    "compiled",
]

from functools import lru_cache

import regex

SEARCH_SECONDS = 0.25
"""How long one search of a tenant's pattern may run."""

REWRITE_SLOW_PATTERN = "write one without nested or overlapping repetition"
"""What to do about a pattern that ran past the bound, the end of each such error."""

REMEMBER_TEXT_CHARS = 65536
"""The longest text on which a pattern that runs past the bound is remembered.

Any pattern takes time in proportion to a long enough text: past this size a
timeout says as much about the text as about the pattern, and remembering
the pattern would have one oversized message refuse every later one.
"""

# Patterns (with their flags) that once ran past the bound, per process;
# bounded so that a caller cannot grow it without end (a pattern dropped
# from it costs its bound again).
_SLOW: set[tuple[str, int]] = set()
_SLOW_MAX = 4096


class PatternTimeout(Exception):
    """A tenant's pattern ran past its time bound.

    Attributes:
        pattern: the pattern.
        earlier: it ran past the bound on an earlier text and was not
            searched this time.
    """

    def __init__(self, pattern: str, *, earlier: bool = False) -> None:
        super().__init__(pattern)
        self.pattern = pattern
        self.earlier = earlier


def compile_pattern(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """``pattern`` compiled by the ``regex`` package, for a caller that keeps it.

    A caller searching the same many patterns on every text (a content
    filter) compiles them once and keeps them: in the shared cache of
    :func:`compiled` more patterns than it holds would each be compiled
    again on every text.

    Args:
        pattern: a regular expression in ``re``'s syntax.
        flags: ``regex`` flags, such as ``regex.IGNORECASE``.

    Returns:
        The compiled pattern.

    Raises:
        regex.error: ``pattern`` is not a valid regular expression.
    """
    return regex.compile(pattern, flags)


@lru_cache(maxsize=1024)
def compiled(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """:func:`compile_pattern`, cached and shared by the process (arguments and errors alike)."""
    return compile_pattern(pattern, flags)


def bounded_search(
    pattern: str | regex.Pattern[str],
    text: str,
    *,
    flags: int = 0,
    seconds: float = SEARCH_SECONDS,
    remember: bool = True,
) -> bool:
    """Whether ``pattern`` is found anywhere in ``text``, within the bound.

    Args:
        pattern: a regular expression in ``re``'s syntax (compiled through
            the shared cache of :func:`compiled`), or one the caller
            compiled (:func:`compile_pattern`) and keeps.
        text: the text to search.
        flags: ``regex`` flags, for a pattern given as text.
        seconds: how long the search may run (a caller sharing one bound
            among several searches passes what is left of it).
        remember: remember, for the life of the process, a pattern that ran
            past the bound, and refuse it at once afterwards, so that it
            costs the process its bound once rather than on every text.
            Only a search that had most of the bound (``seconds`` at least
            nine tenths of :data:`SEARCH_SECONDS`) on a text of at most
            :data:`REMEMBER_TEXT_CHARS` characters is remembered: a pattern
            that ran out of a bound shared with other searches, or of time
            on a huge text, is not thereby slow.

    Returns:
        Whether it was found.

    Raises:
        PatternTimeout: the search ran past ``seconds`` (or, remembered, did
            so before).
        regex.error: ``pattern`` is not a valid regular expression.
    """
    found = compiled(pattern, flags) if isinstance(pattern, str) else pattern
    # The compiled flags: the same pattern is one key, given as text or compiled.
    key = (found.pattern, found.flags)
    if remember and key in _SLOW:
        raise PatternTimeout(found.pattern, earlier=True)
    try:
        return found.search(text, timeout=seconds) is not None
    except TimeoutError:
        if remember and seconds >= 0.9 * SEARCH_SECONDS and len(text) <= REMEMBER_TEXT_CHARS:
            if len(_SLOW) >= _SLOW_MAX:
                _SLOW.clear()
            _SLOW.add(key)
        raise PatternTimeout(found.pattern) from None
