"""JSON Schema validators whose regular expressions run with a time bound.

Tool input schemas, action output schemas and a caller's ``output_schema``
are tenants' text, and jsonschema searches their ``pattern`` and
``patternProperties`` with the standard library's ``re`` in the server's
process, on every value a model or a caller sends. ``re`` has no time
limit: a pattern that backtracks without end (``(a|aa)+$`` on a long run of
``a``) would hold the process, and every tenant's turns, while it runs.

The validators here replace the three keywords that search (``pattern``,
``patternProperties``, and ``additionalProperties``, which consults
``patternProperties``) with :func:`bounded_search`. A search still running at the bound is a
validation error naming the pattern; the pattern is remembered, and later
values checked against it get the same error at once, so one slow pattern
costs the process its bound once, not once per value.
"""

from __future__ import annotations

__all__ = ["schema_validator", "validator_class"]

from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, cast

from jsonschema import ValidationError, validators
from jsonschema import _keywords as keywords

from pilothouse.runtime._bounded_search import (
    REWRITE_SLOW_PATTERN,
    PatternTimeout,
    bounded_search,
)


def _timed_out(exc: PatternTimeout) -> ValidationError:
    return ValidationError(
        f"the pattern '{exc.pattern}' ran past its time bound on this value; "
        + REWRITE_SLOW_PATTERN
    )


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = bounded_search(pattern, instance)
    except PatternTimeout as exc:
        yield _timed_out(exc)
        return
    if not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in cast(Mapping[str, Any], instance).items():
            try:
                found = bounded_search(pattern, key)
            except PatternTimeout as exc:
                yield _timed_out(exc)
                return
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    patterns = cast(Mapping[str, Any], schema.get("patternProperties") or {})
    if not patterns:
        # No pattern is searched: jsonschema's own keyword.
        # jsonschema's keyword is a generator, typed as returning None.
        original: Any = cast(Any, keywords).additionalProperties
        yield from original(validator, additional, instance, schema)
        return
    if not validator.is_type(instance, "object"):
        return
    properties = cast(Mapping[str, Any], schema.get("properties") or {})
    extras: list[str] = []
    for key in cast(Mapping[str, Any], instance):
        if key in properties:
            continue
        try:
            matched = any(bounded_search(pattern, key) for pattern in patterns)
        except PatternTimeout as exc:
            yield _timed_out(exc)
            return
        if not matched:
            extras.append(key)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        verb = "does" if len(extras) == 1 else "do"
        joined = ", ".join(repr(each) for each in sorted(extras))
        listed = ", ".join(repr(each) for each in sorted(patterns))
        yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")


@cache
def _bounded(cls: Any) -> Any:
    extend: Any = cast(Any, validators).extend  # partly typed
    return extend(
        cls,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )


def validator_class(schema: Mapping[str, Any]) -> Any:
    """The validator class for ``schema``'s draft, its patterns bounded.

    Args:
        schema: a JSON schema.

    Returns:
        A jsonschema validator class (``check_schema`` as the draft's).
    """
    draft: Any = cast(Any, validators).validator_for(schema)  # partly typed
    return _bounded(draft)


def schema_validator(schema: Mapping[str, Any]) -> Any:
    """A validator of ``schema``, its patterns searched within the bound.

    Args:
        schema: a JSON schema.

    Returns:
        A jsonschema validator.
    """
    return validator_class(schema)(schema)
