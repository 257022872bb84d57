"""The fields of a REST tool's URL template.

A REST tool's URL (``settings.url``, ``settings.base_url``, and the one an
OpenAPI operation builds) is filled with ``str.format`` at each call, so
each ``{field}`` must be a plain name: anything more (an attribute, an
index, a conversion, a format spec) would have the server do what the
catalog writer chose. The catalog checks a tool's settings when it is
written; the tool checks its URL again when it is built.
"""

from __future__ import annotations

__all__ = ["url_template_fields"]

import re
import string

_TEMPLATE_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def url_template_fields(url: str) -> tuple[str, ...]:
    """Return the ``{name}`` fields of a REST tool's URL template, in order.

    Args:
        url: the template.

    Returns:
        The field names.

    Raises:
        ValueError: the rule a field breaks: it is not a plain name
            (``{a.b}``, ``{0}``, ``{}``, ``{id:>9}``, ``{id!r}``), or the
            braces do not pair.
    """
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(url))
    except ValueError as exc:
        raise ValueError(f"bad template: {exc}") from exc
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not _TEMPLATE_FIELD.match(name):
            raise ValueError(f"template field '{{{name}}}' must be a name")
        if spec or conversion:
            # The URL is filled with str.format: a width ("{id:>4000000000}")
            # would build a string of that many characters in the server.
            written = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(
                f"template field '{{{written}}}' must be a plain name; "
                f"write '{{{name}}}' (no conversion or format spec)"
            )
        if name not in names:
            names.append(name)
    return tuple(names)
