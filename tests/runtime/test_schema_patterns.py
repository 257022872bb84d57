"""Regular expressions of tenant schemas are searched with a time bound.

A tool's input schema, an action's output schema and a caller's
``output_schema`` are written by tenants, and their ``pattern`` and
``patternProperties`` are searched in the server's process on every value a
model or a caller sends. One that backtracks without end (``(a|aa)+$``)
would hold the process, and every tenant's turns, while it runs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from pilothouse.runtime._toolset import ArgumentValidators

SLOW = "(a|aa)+$"
VALUE = "a" * 35 + "!"
BOUND = (
    f"the pattern '{SLOW}' ran past its time bound on this value; "
    "write one without nested or overlapping repetition"
)


@pytest.mark.parametrize(
    ("schema", "arguments"),
    [
        ({"properties": {"s": {"type": "string", "pattern": SLOW}}}, {"s": VALUE}),
        ({"patternProperties": {SLOW: {"type": "integer"}}}, {VALUE: 1}),
        (
            {"patternProperties": {SLOW: {"type": "integer"}}, "additionalProperties": False},
            {VALUE: 1},
        ),
    ],
    ids=["pattern", "patternProperties", "additionalProperties"],
)
def test_a_schema_pattern_that_backtracks_without_end_is_an_error_within_its_bound(
    schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    validators = ArgumentValidators()
    validators.add("lookup", {"type": "object", **schema})
    started = time.monotonic()

    errors = [error.message for error in validators["lookup"].iter_errors(arguments)]

    assert time.monotonic() - started < 2
    assert set(errors) == {BOUND}


def test_patterns_that_end_quickly_validate_as_before() -> None:
    validators = ArgumentValidators()
    validators.add(
        "lookup",
        {
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[A-Z]{3}-\\d+$"}},
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        },
    )
    validator = validators["lookup"]

    assert list(validator.iter_errors({"id": "ABC-12", "x-n": 3})) == []
    assert [e.message for e in validator.iter_errors({"id": "abc", "x-n": "3", "y": 1})] == [
        "'abc' does not match '^[A-Z]{3}-\\\\d+$'",
        "'3' is not of type 'integer'",
        "'y' does not match any of the regexes: '^x-'",
    ]


LONG = "a" * 60 + "!"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "schema",
    [
        {"patternProperties": {SLOW: {"type": "integer"}}, "unevaluatedProperties": False},
        {"allOf": [{"patternProperties": {SLOW: {}}}], "unevaluatedProperties": False},
        {
            "$schema": "https://json-schema.org/draft/2019-09/schema",
            "patternProperties": {SLOW: {"type": "integer"}},
            "unevaluatedProperties": False,
        },
    ],
    ids=["2020-12", "through-allOf", "2019-09"],
)
def test_unevaluated_properties_search_pattern_properties_within_the_bound(
    schema: dict[str, Any],
) -> None:
    # jsonschema's own unevaluatedProperties searches the patternProperties
    # it meets with re, which would not end on this key (the timeout marker
    # fails the test instead of hanging it).
    validators = ArgumentValidators()
    validators.add("lookup", {"type": "object", **schema})

    errors = [error.message for error in validators["lookup"].iter_errors({LONG: 1})]

    # (Through allOf, the branch that timed out does not evaluate the key,
    # which is then also unexpected.)
    assert BOUND in errors
    assert set(errors) <= {
        BOUND,
        f"Unevaluated properties are not allowed ({LONG!r} was unexpected)",
    }


def test_unevaluated_properties_still_judge_as_jsonschema_does() -> None:
    validators = ArgumentValidators()
    validators.add(
        "lookup",
        {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "allOf": [{"patternProperties": {"^x-": {"type": "integer"}}}],
            "if": {"required": ["kind"]},
            "then": {"properties": {"kind": {"const": "a"}}},
            "unevaluatedProperties": False,
        },
    )
    validator = validators["lookup"]

    assert list(validator.iter_errors({"id": "1", "x-n": 3, "kind": "a"})) == []
    assert [e.message for e in validator.iter_errors({"id": "1", "x-n": 3, "y": 1, "z": 2})] == [
        "Unevaluated properties are not allowed ('y', 'z' were unexpected)"
    ]


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        (
            {
                "$schema": "https://json-schema.org/draft/2019-09/schema",
                "$recursiveAnchor": True,
                "type": "object",
                "properties": {"a": {"$recursiveRef": "#"}},
                "patternProperties": {"^x": {}},
                "unevaluatedProperties": False,
            },
            {"a": {"x1": 1, "b": 2}, "x2": 1, "c": 3},
        ),
        (
            {
                "$defs": {"p": {"patternProperties": {"^x": {}}}},
                "$ref": "#/$defs/p",
                "properties": {"k": True},
                "dependentSchemas": {"k": {"properties": {"z": True}}},
                "unevaluatedProperties": False,
            },
            {"x": 1, "z": 2, "y": 3},
        ),
        (
            {
                "patternProperties": {"^x": {}},
                "anyOf": [{"properties": {"q": True}}],
                "unevaluatedProperties": {"type": "integer"},
            },
            {"q": "s", "r": 1, "t": "x"},
        ),
    ],
    ids=["2019-09-recursiveRef", "ref-and-dependentSchemas", "anyOf-subschema"],
)
def test_the_bounded_unevaluated_properties_walk_the_schema_as_jsonschema_does(
    schema: dict[str, Any], value: dict[str, Any]
) -> None:
    from jsonschema import validators as jsonschema_validators

    from pilothouse.runtime._schema_patterns import schema_validator

    theirs = jsonschema_validators.validator_for(schema)(schema)
    expected = sorted(error.message for error in theirs.iter_errors(value))

    assert expected  # each case leaves a property unevaluated
    assert (
        sorted(error.message for error in schema_validator(schema).iter_errors(value)) == expected
    )
