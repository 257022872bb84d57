"""JSON Schema validators whose regular expressions run with a time bound.

Tool input schemas, action output schemas and a caller's ``output_schema``
are tenants' text, and jsonschema searches their ``pattern`` and
``patternProperties`` with the standard library's ``re`` in the server's
process, on every value a model or a caller sends. ``re`` has no time
limit: a pattern that backtracks without end (``(a|aa)+$`` on a long run of
``a``) would hold the process, and every tenant's turns, while it runs.

The validators here replace the four keywords that search (``pattern``,
``patternProperties``, and ``additionalProperties`` and
``unevaluatedProperties``, which consult ``patternProperties``) with ones
that use :func:`bounded_search`. A search still running at the bound is a
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


def _evaluated_keys(validator: Any, instance: Any, schema: Any, *, draft2019: bool) -> list[str]:
    """The keys of ``instance`` that ``schema`` evaluates, its patterns bounded.

    jsonschema's own ``unevaluatedProperties`` finds them with ``re``, and
    searches every ``patternProperties`` pattern it meets there (through
    ``allOf``, ``$ref``, ``if`` and the rest) without a bound; this follows
    its walk (the 2020-12 one, or the 2019-09 one with ``draft2019``) with
    :func:`bounded_search` instead.

    Raises:
        PatternTimeout: a pattern ran past its bound.
    """
    if validator.is_type(schema, "boolean"):
        return []
    found = _referenced_keys(validator, instance, schema, draft2019=draft2019)
    found += _own_keys(validator, instance, schema, draft2019=draft2019)
    dependent = cast(Mapping[str, Any], schema.get("dependentSchemas") or {})
    for name, subschema in dependent.items():
        if name in instance:
            found += _evaluated_keys(validator, instance, subschema, draft2019=draft2019)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                found += _evaluated_keys(validator, instance, subschema, draft2019=draft2019)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            found += _evaluated_keys(validator, instance, schema["if"], draft2019=draft2019)
            if "then" in schema:
                found += _evaluated_keys(validator, instance, schema["then"], draft2019=draft2019)
        elif "else" in schema:
            found += _evaluated_keys(validator, instance, schema["else"], draft2019=draft2019)
    return found


def _referenced_keys(validator: Any, instance: Any, schema: Any, *, draft2019: bool) -> list[str]:
    """The keys the schemas ``schema`` refers to evaluate."""
    refs: list[Any] = []
    if (ref := schema.get("$ref")) is not None:
        refs.append(validator._resolver.lookup(ref))  # as jsonschema does
    if draft2019 and "$recursiveRef" in schema:
        from referencing.jsonschema import lookup_recursive_ref

        refs.append(lookup_recursive_ref(validator._resolver))
    if not draft2019 and (dynamic := schema.get("$dynamicRef")) is not None:
        refs.append(validator._resolver.lookup(dynamic))
    found: list[str] = []
    for resolved in refs:
        inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
        found += _evaluated_keys(inner, instance, resolved.contents, draft2019=draft2019)
    return found


def _own_keys(validator: Any, instance: Any, schema: Any, *, draft2019: bool) -> list[str]:
    """The keys ``schema``'s own property keywords evaluate."""
    keys = cast(Mapping[str, Any], instance)
    found: list[str] = []
    if draft2019:
        for keyword in ("properties", "additionalProperties", "unevaluatedProperties"):
            value = schema.get(keyword)
            if value is True:
                found += keys
            elif validator.is_type(value, "object"):
                found += [name for name in value if name in keys]
    else:
        properties = schema.get("properties")
        if validator.is_type(properties, "object"):
            found += [name for name in keys if name in properties]
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            if (subschema := schema.get(keyword)) is not None:
                found += [
                    name
                    for name, value in keys.items()
                    if next(validator.descend(value, subschema), None) is None
                ]
    patterns = cast(Mapping[str, Any], schema.get("patternProperties") or {})
    for name in keys:
        found += [name for pattern in patterns if bounded_search(pattern, name)]
    return found


def _unevaluated_properties(draft2019: bool) -> Any:
    def keyword(
        validator: Any, unevaluated: Any, instance: Any, schema: Any
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        try:
            evaluated = _evaluated_keys(validator, instance, schema, draft2019=draft2019)
        except PatternTimeout as exc:
            yield _timed_out(exc)
            return
        failing = [
            name
            for name in cast(Mapping[str, Any], instance)
            if name not in evaluated
            and next(
                validator.descend(instance[name], unevaluated, path=name, schema_path=name), None
            )
            is not None
        ]
        if not failing:
            return
        # jsonschema's own wording.
        verb = "was" if len(failing) == 1 else "were"
        if unevaluated is False:
            listed = ", ".join(repr(name) for name in sorted(failing, key=str))
            yield ValidationError(
                f"Unevaluated properties are not allowed ({listed} {verb} unexpected)"
            )
        else:
            listed = ", ".join(repr(name) for name in failing)
            yield ValidationError(
                "Unevaluated properties are not valid under the given schema "
                f"({listed} {verb} unevaluated and invalid)"
            )

    return keyword


@cache
def _bounded(cls: Any) -> Any:
    extend: Any = cast(Any, validators).extend  # partly typed
    replaced: dict[str, Any] = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    # Only the 2019-09 and 2020-12 drafts know unevaluatedProperties; each
    # walks the schema its own way.
    if "unevaluatedProperties" in cls.VALIDATORS:
        draft2019 = (
            cls.VALIDATORS["unevaluatedProperties"] is not cast(Any, keywords).unevaluatedProperties
        )
        replaced["unevaluatedProperties"] = _unevaluated_properties(draft2019)
    return extend(cls, replaced)


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
