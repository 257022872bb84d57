"""The runtime config's ``retrieval`` object: what it accepts and how it refuses (no database)."""

from __future__ import annotations

from typing import Any

import pytest

from pilothouse.runtime import RuntimeConfig, RuntimeConfigError


def test_collections_are_read_in_order_without_repeats() -> None:
    config = RuntimeConfig.parse(
        {"retrieval": {"collections": ["HANDBOOK", "NOTES", "HANDBOOK"], "topK": 2}}
    )
    assert config.retrieval.collections == ("HANDBOOK", "NOTES")
    assert config.retrieval.top_k == 2
    assert RuntimeConfig.parse({"retrieval": {"collections": None}}).retrieval.collections == ()
    assert RuntimeConfig.parse({"retrieval": {}}).retrieval.collections == ()


@pytest.mark.parametrize(
    ("collections", "message"),
    [
        ("HANDBOOK", "'collections' must be a list of document collection codes"),
        ({"code": "HANDBOOK"}, "'collections' must be a list"),
        ([], "'collections' is empty"),
        (["HANDBOOK", 7], r"'collections\[1\]' must be a document collection code"),
        (["  "], r"'collections\[0\]' must be a document collection code"),
        (["X" * 65], r"'collections\[0\]' must be a document collection code"),
        ([f"C{i}" for i in range(17)], "'collections' names more than 16 collections"),
    ],
)
def test_bad_collections_are_refused_naming_the_key(collections: Any, message: str) -> None:
    with pytest.raises(RuntimeConfigError, match=f"runtime config: retrieval: {message}"):
        RuntimeConfig.parse({"retrieval": {"collections": collections}})


def test_an_unknown_key_lists_collections_among_the_known() -> None:
    with pytest.raises(RuntimeConfigError, match="known: .*collections"):
        RuntimeConfig.parse({"retrieval": {"collection": ["HANDBOOK"]}})
