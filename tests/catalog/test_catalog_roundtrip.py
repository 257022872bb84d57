"""Generated configurations survive export -> YAML -> validation unchanged."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pilothouse.catalog import KINDS, ConfigurationSpec, dump_yaml, spec_document, validate_paths

# A configuration code is at most 4 characters (seed 000).
codes = st.text("ABCXYZ019_.-", min_size=1, max_size=4)
unit = st.floats(min_value=0, max_value=1, allow_nan=False)

configurations = st.builds(
    ConfigurationSpec,
    code=codes,
    name=st.text(max_size=40),
    temperature=st.none() | st.floats(min_value=0, max_value=2, allow_nan=False),
    top_p=st.none() | unit,
    top_k=st.none() | st.integers(min_value=1, max_value=1000),
    max_tokens=st.integers(min_value=1, max_value=1_000_000),
    stop=st.lists(st.text(min_size=1, max_size=10), max_size=3),
    presence_penalty=st.none() | st.floats(min_value=-2, max_value=2, allow_nan=False),
    retry_count=st.integers(min_value=0, max_value=10),
    retry_delay=st.floats(min_value=0, max_value=60, allow_nan=False),
    active=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(configurations, max_size=4, unique_by=lambda c: c.code))
def test_configurations_round_trip_through_yaml(specs: list[ConfigurationSpec]) -> None:
    kind = KINDS["configurations"]
    text = dump_yaml({"configurations": [spec_document(kind, s) for s in specs]})
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.yaml"
        path.write_text(text, encoding="utf-8")
        parsed, issues = validate_paths([path])
    assert issues == []
    assert [e.spec for e in parsed.entries.get("configurations", [])] == specs


def test_strings_starting_with_yaml_indicators_stay_strings(tmp_path: Path) -> None:
    """Regression: '?0' in a flow sequence was written plain and read back as a key."""
    kind = KINDS["configurations"]
    spec = ConfigurationSpec(code="Q", max_tokens=1, stop=["?0", ": x", "- a", "#c"])
    path = tmp_path / "c.yaml"
    path.write_text(dump_yaml({"configurations": [spec_document(kind, spec)]}), encoding="utf-8")
    parsed, issues = validate_paths([path])
    assert issues == []
    assert parsed.entries["configurations"][0].spec == spec
