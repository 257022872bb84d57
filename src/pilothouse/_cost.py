"""How every face writes a cost: one plain decimal, never an exponent.

Costs are ``Decimal`` values: a turn's is summed from the model's prices, a
conversation's is read back from a ``NUMERIC(18, 8)`` column. ``str()`` of
either writes small or zero values with an exponent (``0E-8``,
``7.5E-7``), which JSON readers, spreadsheets and people take for text or
misread. :func:`cost_text` is the one writer: REST, the OpenAI-compatible
face, ``/v1/invoke``, JSON-RPC, MCP, the bus, the CLI, the playground and the
turn's own audit record all use it, so one cost reads the same everywhere.
"""

from __future__ import annotations

__all__ = ["cost_text"]

from decimal import Decimal, InvalidOperation


def cost_text(value: Decimal | int | str) -> str:
    """Write a cost in plain decimal notation, without trailing zeros.

    Args:
        value: the cost (a ``Decimal``, an ``int``, or a decimal string).

    Returns:
        ``"0"`` for any zero (``0E-8`` included), otherwise the digits with a
        point where needed: ``7.5E-7`` is ``"0.00000075"``, ``1.50000000``
        is ``"1.5"``.

    Raises:
        ValueError: ``value`` is not a finite decimal number.
    """
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation as exc:
        raise ValueError(f"a cost must be a decimal number, not {value!r}") from exc
    if not number.is_finite():
        raise ValueError(f"a cost must be a finite decimal number, not {value!r}")
    text = format(number, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "", "0") else text
