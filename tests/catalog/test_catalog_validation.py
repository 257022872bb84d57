"""Every validation rule of catalog files, each with its exact one-line message."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pilothouse.catalog import ExistingCatalog, validate_paths

BASE = """
providers:
  - code: LOCL
    kind: local
models:
  - code: SMOL
    provider: LOCL
    model_name: SmolLM2-135M-Instruct
configurations:
  - code: DFLT
    max_tokens: 256
"""


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def errors(tmp_path: Path, text: str, existing: ExistingCatalog | None = None) -> list[str]:
    write(tmp_path, text)
    _, issues = validate_paths([tmp_path], existing)
    return [str(issue).replace(f"{tmp_path}/", "") for issue in issues]


def test_the_examples_are_valid() -> None:
    parsed, issues = validate_paths([Path(__file__).parents[2] / "examples" / "catalog"])
    assert issues == []
    assert parsed.counts()["actions"] == 4


def test_an_empty_file_is_an_empty_catalog(tmp_path: Path) -> None:
    assert errors(tmp_path, "") == []


def test_malformed_yaml_is_one_line_at_the_parser_error(tmp_path: Path) -> None:
    assert errors(tmp_path, "providers:\n  - code: [A,\n    kind: local: x\n") == [
        "c.yaml:3: catalog: yaml: expected ',' or ']', but got ':'"
    ]


def test_a_repeated_yaml_key_does_not_echo_values(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        """
        providers:
          - code: A
            kind: openai
            api_key: sk-one
            api_key: sk-two
        """,
    )
    assert lines == ["c.yaml:5: catalog: yaml: a mapping key is repeated"]


def test_a_missing_path_is_reported(tmp_path: Path) -> None:
    _, issues = validate_paths([tmp_path / "nope.yaml"])
    assert [i.rule for i in issues] == ["no such file or folder"]


def test_a_document_must_be_a_mapping(tmp_path: Path) -> None:
    assert errors(tmp_path, "- a\n- b\n") == [
        "c.yaml:1: catalog: document: must be a mapping of kinds (providers, models, actions, ...)"
    ]


def test_unknown_top_level_key_suggests_the_closest_kind(tmp_path: Path) -> None:
    assert errors(tmp_path, "actionz: []\n") == [
        "c.yaml:1: catalog: actionz: unknown kind (did you mean 'actions'?)"
    ]


def test_a_kind_must_be_a_list(tmp_path: Path) -> None:
    assert errors(tmp_path, "providers:\n  code: A\n") == [
        "c.yaml:1: catalog: providers: must be a list of mappings"
    ]


def test_each_entity_must_be_a_mapping(tmp_path: Path) -> None:
    assert errors(tmp_path, "providers:\n  - LOCAL\n") == [
        "c.yaml:2: provider: providers[0]: must be a mapping"
    ]


def test_unknown_field_suggests_the_closest_name(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        BASE
        + """
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    promtp: hi
    prompt: hi
""",
    )
    assert lines == ["c.yaml:16: action 'A': promtp: unknown field (did you mean 'prompt'?)"]


def test_missing_max_tokens(tmp_path: Path) -> None:
    assert errors(tmp_path, "configurations:\n  - code: C\n    temperature: 1\n") == [
        "c.yaml:2: configuration 'C': max_tokens: required"
    ]


def test_missing_action_model_configuration_and_prompt(tmp_path: Path) -> None:
    assert errors(tmp_path, "actions:\n  - code: A\n") == [
        "c.yaml:2: action 'A': model: required",
        "c.yaml:2: action 'A': configuration: required",
        "c.yaml:2: action 'A': prompt: required",
    ]


def test_wrong_type(tmp_path: Path) -> None:
    assert errors(tmp_path, "configurations:\n  - code: C\n    max_tokens: lots\n") == [
        "c.yaml:3: configuration 'C': max_tokens: must be an integer"
    ]


def test_a_list_field_must_be_a_list(tmp_path: Path) -> None:
    assert errors(tmp_path, "configurations:\n  - code: C\n    max_tokens: 1\n    stop: 7\n") == [
        "c.yaml:4: configuration 'C': stop: must be a list"
    ]


def test_over_long_code(tmp_path: Path) -> None:
    assert errors(tmp_path, "configurations:\n  - code: ABCDEFGHIJKLMNO\n    max_tokens: 1\n") == [
        "c.yaml:2: configuration 'ABCDEFGHIJKLMNO': code: at most 4 characters (got 15)"
    ]


@pytest.mark.parametrize(
    ("kind", "entity", "limit"),
    [("persona_types", "persona type", 4), ("applications", "application", 8)],
)
def test_code_limits_follow_code_lengths(
    tmp_path: Path, kind: str, entity: str, limit: int
) -> None:
    code = "X" * (limit + 1)
    assert errors(tmp_path, f"{kind}:\n  - code: {code}\n") == [
        f"c.yaml:2: {entity} '{code}': code: at most {limit} characters (got {limit + 1})"
    ]


def test_mcp_client_names_may_be_longer(tmp_path: Path) -> None:
    name = "n" * 33
    assert errors(
        tmp_path, f"mcp_clients:\n  - name: {name}\n    transport: stdio\n    command: x\n"
    ) == [f"c.yaml:2: mcp client '{name}': name: at most 32 characters (got 33)"]


def test_code_characters(tmp_path: Path) -> None:
    assert errors(tmp_path, "configurations:\n  - code: A B\n    max_tokens: 1\n") == [
        "c.yaml:2: configuration 'A B': code: must match ^[A-Za-z0-9_.-]+$"
    ]


def test_duplicate_key_in_one_file(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        "configurations:\n  - code: C\n    max_tokens: 1\n  - code: C\n    max_tokens: 2\n",
    )
    assert lines == [
        "c.yaml:4: configuration 'C': code: duplicate configuration 'C' (first defined at c.yaml:2)"
    ]


def test_duplicate_key_across_two_files_names_both(tmp_path: Path) -> None:
    write(tmp_path, "configurations:\n  - code: C\n    max_tokens: 1\n", "a/one.yaml")
    write(tmp_path, "# again\nconfigurations:\n  - code: C\n    max_tokens: 2\n", "b/two.yml")
    _, issues = validate_paths([tmp_path])
    assert [str(i) for i in issues] == [
        f"{tmp_path}/b/two.yml:3: configuration 'C': code: duplicate configuration 'C' "
        f"(first defined at {tmp_path}/a/one.yaml:2)"
    ]


def test_unknown_model_reference(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        BASE
        + """
actions:
  - code: A
    model: GPT5
    configuration: DFLT
    prompt: hi
""",
    )
    assert lines == ["c.yaml:14: action 'A': model: unknown model 'GPT5'"]


def test_unknown_reference_in_a_list_points_at_the_item(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        BASE
        + """
skills:
  - code: S
    prompt: s
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    prompt: hi
    skills:
      - S
      - NOPE
    advisors: [LOG, {advisor: CACHE, order: 5}]
""",
    )
    assert lines == [
        "c.yaml:22: action 'A': skills[1]: unknown skill 'NOPE'",
        "c.yaml:23: action 'A': advisors[0]: unknown advisor 'LOG'",
        "c.yaml:23: action 'A': advisors[1]: unknown advisor 'CACHE'",
    ]


def test_references_may_point_into_the_stored_catalog(tmp_path: Path) -> None:
    text = "actions:\n  - code: A\n    model: SMOL\n    configuration: DFLT\n    prompt: p\n"
    existing = ExistingCatalog(keys={"models": {"SMOL"}, "configurations": {"DFLT"}})
    assert errors(tmp_path, text, existing) == []


def test_an_invalid_entity_still_counts_as_defined(tmp_path: Path) -> None:
    # Only the broken model is reported, not every action that names it.
    lines = errors(
        tmp_path,
        """
models:
  - code: SMOL
    provider: LOCL
providers:
  - code: LOCL
    kind: local
configurations:
  - code: DFLT
    max_tokens: 1
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    prompt: p
""",
    )
    assert lines == ["c.yaml:2: model 'SMOL': model_name: required"]


def test_transport_must_be_known(tmp_path: Path) -> None:
    assert errors(tmp_path, "mcp_clients:\n  - name: t\n    transport: pigeon\n") == [
        "c.yaml:3: mcp client 't': transport: must be one of: stdio, streamable-http, sse "
        "(got 'pigeon')"
    ]


@pytest.mark.parametrize("transport", ["ST", "stdio", "STDIO"])
def test_transport_accepts_codes_and_names(tmp_path: Path, transport: str) -> None:
    text = f"mcp_clients:\n  - name: t\n    transport: {transport}\n    command: mcp-server-time\n"
    assert errors(tmp_path, text) == []


def test_capabilities_must_be_known(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        "providers:\n  - code: P\n    kind: local\nmodels:\n  - code: M\n    provider: P\n"
        "    model_name: m\n    capabilities: [FC, XX]\n",
    )
    assert lines == [
        "c.yaml:8: model 'M': capabilities[1]: must be one of: FC, VI, SR, JM, EM, AU (got 'XX')"
    ]


def test_schema_cardinality_must_be_known(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        BASE
        + """
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    prompt: p
    schemas:
      output:
        cardinality: lots
""",
    )
    assert lines == [
        "c.yaml:19: action 'A': schemas.output.cardinality: must be one of: item, list (got 'lots')"
    ]


def test_schema_direction_must_be_known(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        BASE
        + """
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    prompt: p
    schemas:
      outptu: {}
""",
    )
    assert lines == [
        "c.yaml:18: action 'A': schemas.outptu: unknown field (did you mean 'output'?)"
    ]


def test_action_schema_must_be_valid_json_schema(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        BASE
        + """
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    prompt: p
    schemas:
      output:
        schema:
          type: object
          properties:
            name: {type: strin}
""",
    )
    assert len(lines) == 1
    assert lines[0].startswith(
        "c.yaml:22: action 'A': schemas.output.schema.properties.name.type: "
        "not a valid JSON Schema: "
    )


def test_tool_input_schema_must_be_valid_json_schema(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        "tools:\n  - code: T\n    name: t\n    kind: python\n    input_schema:\n      type: 5\n",
    )
    assert lines == [
        "c.yaml:6: tool 'T': input_schema.type: not a valid JSON Schema: "
        "5 is not valid under any of the given schemas"
    ]


def test_stdio_needs_a_command(tmp_path: Path) -> None:
    assert errors(tmp_path, "mcp_clients:\n  - name: t\n    transport: stdio\n") == [
        "c.yaml:2: mcp client 't': command: required for the stdio transport"
    ]


@pytest.mark.parametrize(("transport", "name"), [("SH", "streamable-http"), ("SE", "sse")])
def test_http_transports_need_a_url(tmp_path: Path, transport: str, name: str) -> None:
    assert errors(tmp_path, f"mcp_clients:\n  - name: t\n    transport: {transport}\n") == [
        f"c.yaml:2: mcp client 't': url: required for the {name} transport"
    ]


def test_literal_api_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    lines = errors(
        tmp_path, "providers:\n  - code: P\n    kind: openai\n    api_key: sk-SeCrEt42\n"
    )
    assert lines == [
        "c.yaml:4: provider 'P': api_key: must be a @secrets(NAME) reference, not a literal value"
    ]
    assert "SeCrEt42" not in "\n".join(lines)


def test_literal_api_key_is_refused_even_when_the_entity_has_other_errors(tmp_path: Path) -> None:
    lines = errors(tmp_path, "providers:\n  - code: P\n    kind: nope\n    api_key: sk-SeCrEt42\n")
    assert (
        "c.yaml:4: provider 'P': api_key: must be a @secrets(NAME) reference, not a literal value"
        in lines
    )
    assert "SeCrEt42" not in "\n".join(lines)


def test_api_key_reference_is_accepted(tmp_path: Path) -> None:
    text = 'providers:\n  - code: P\n    kind: openai\n    api_key: "@secrets(OPENAI_API_KEY)"\n'
    assert errors(tmp_path, text) == []


def test_confidential_header_must_be_a_reference(tmp_path: Path) -> None:
    lines = errors(
        tmp_path,
        """
mcp_clients:
  - name: web
    transport: streamable-http
    url: http://127.0.0.1:9/mcp
    headers:
      X-Tenant: acme-hidden
      Accept: application/json
    confidential_headers: [X-Tenant]
""",
    )
    assert lines == [
        "c.yaml:6: mcp client 'web': headers.X-Tenant: must be a @secrets(NAME) reference, "
        "not a literal value"
    ]
    assert "acme-hidden" not in lines[0]


def test_authorization_header_may_embed_a_reference(tmp_path: Path) -> None:
    text = """
providers:
  - code: P
    kind: openai-compatible
    headers:
      Authorization: Bearer @secrets(TOKEN)
"""
    assert errors(tmp_path, text) == []


def test_provider_authorization_header_literal_is_refused(tmp_path: Path) -> None:
    text = (
        "providers:\n  - code: P\n    kind: openai\n    headers:\n      Authorization: Bearer x\n"
    )
    assert errors(tmp_path, text) == [
        "c.yaml:5: provider 'P': headers.Authorization: must be a @secrets(NAME) reference, "
        "not a literal value"
    ]


def test_tool_rest_header_literal_is_refused(tmp_path: Path) -> None:
    text = """
tools:
  - code: T
    name: lookup
    kind: rest
    settings:
      headers:
        X-Api-Key: abc123
"""
    assert errors(tmp_path, text) == [
        "c.yaml:7: tool 'T': settings.headers.X-Api-Key: must be a @secrets(NAME) reference, "
        "not a literal value"
    ]


def test_skill_dependency_cycle(tmp_path: Path) -> None:
    text = """
skills:
  - code: A
    prompt: a
    depends_on: [B]
  - code: B
    prompt: b
    depends_on:
      - A
"""
    assert errors(tmp_path, text) == [
        "c.yaml:4: skill 'A': depends_on[0]: dependency cycle A -> B -> A"
    ]


def test_skill_depending_on_itself(tmp_path: Path) -> None:
    text = "skills:\n  - code: A\n    prompt: a\n    depends_on: [A]\n"
    assert errors(tmp_path, text) == ["c.yaml:4: skill 'A': depends_on[0]: dependency cycle A -> A"]


def test_skill_cycle_through_the_stored_catalog(tmp_path: Path) -> None:
    text = "skills:\n  - code: A\n    prompt: a\n    depends_on: [B]\n"
    existing = ExistingCatalog(keys={"skills": {"B"}}, skill_dependencies={"B": ["A"]})
    assert errors(tmp_path, text, existing) == [
        "c.yaml:4: skill 'A': depends_on[0]: dependency cycle A -> B -> A"
    ]


def test_skill_parent_cycle(tmp_path: Path) -> None:
    text = (
        "skills:\n  - code: A\n    prompt: a\n    parent: B\n"
        "  - code: B\n    prompt: b\n    parent: A\n"
    )
    assert errors(tmp_path, text) == ["c.yaml:4: skill 'A': parent: parent cycle A -> B -> A"]


@pytest.mark.parametrize(
    ("kind", "fields", "field", "value", "rule"),
    [
        ("configurations", "max_tokens: 1", "temperature", "2.5", "must be at most 2 (got 2.5)"),
        ("configurations", "max_tokens: 1", "temperature", "-1", "must be at least 0 (got -1)"),
        ("configurations", "max_tokens: 1", "top_p", "1.5", "must be at most 1 (got 1.5)"),
        ("configurations", "max_tokens: 1", "top_k", "0", "must be at least 1 (got 0)"),
        ("configurations", "temperature: 1", "max_tokens", "0", "must be at least 1 (got 0)"),
        ("configurations", "max_tokens: 1", "retry_count", "-1", "must be at least 0 (got -1)"),
        ("configurations", "max_tokens: 1", "retry_delay", "-1", "must be at least 0 (got -1)"),
        ("configurations", "max_tokens: 1", "presence_penalty", "3", "must be at most 2 (got 3)"),
        (
            "document_collections",
            "store: VS\n    collection_name: docs",
            "similarity_threshold",
            "1.5",
            "must be at most 1 (got 1.5)",
        ),
        (
            "document_collections",
            "store: VS\n    collection_name: docs",
            "top_k",
            "0",
            "must be at least 1 (got 0)",
        ),
        ("memory_strategies", "kind: WINDOW", "window_size", "0", "must be at least 1 (got 0)"),
    ],
)
def test_numbers_in_range(
    tmp_path: Path, kind: str, fields: str, field: str, value: str, rule: str
) -> None:
    from pilothouse.catalog import KINDS

    entity = KINDS[kind].entity_name
    extra = "vector_stores:\n  - code: VS\n" if kind == "document_collections" else ""
    text = f"{extra}{kind}:\n  - code: X\n    {fields}\n    {field}: {value}\n"
    line = text.count("\n")
    assert errors(tmp_path, text) == [f"c.yaml:{line}: {entity} 'X': {field}: {rule}"]


def test_every_error_is_collected(tmp_path: Path) -> None:
    text = """
configurations:
  - code: C
    temperature: 9
  - code: ABCDEFGHIJKLMNOP
    max_tokens: 1
actions:
  - code: A
    model: M
    configuration: C
    prompt: p
"""
    assert errors(tmp_path, text) == [
        "c.yaml:2: configuration 'C': max_tokens: required",
        "c.yaml:3: configuration 'C': temperature: must be at most 2 (got 9)",
        "c.yaml:4: configuration 'ABCDEFGHIJKLMNOP': code: at most 4 characters (got 16)",
        "c.yaml:8: action 'A': model: unknown model 'M'",
    ]


def test_inactive_entities_and_plain_advisor_codes_are_accepted(tmp_path: Path) -> None:
    text = (
        BASE
        + """
advisors:
  - code: LOG
    implementation: logging
actions:
  - code: A
    model: SMOL
    configuration: DFLT
    prompt: p
    advisors: [LOG]
    active: false
"""
    )
    write(tmp_path, text)
    parsed, issues = validate_paths([tmp_path])
    assert issues == []
    action = parsed.entries["actions"][0].spec
    assert action.active is False


# Nine levels of nine aliases: 342 bytes that expand to 9**9 strings.
ALIAS_BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]"
            for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)


def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    assert len(ALIAS_BOMB) < 400
    (problem,) = errors(tmp_path, ALIAS_BOMB)
    assert "aliases expand to more than 200,000 values" in problem


def test_a_few_aliases_are_still_fine(tmp_path: Path) -> None:
    text = """
    persona_types:
      - {code: EDIT, name: Editors}
    personas:
      - {code: ONE, type: EDIT, prompt: &shared Be brief and exact.}
      - {code: TWO, type: EDIT, prompt: *shared}
    """
    # An alias used as catalogs use them: read as the value it names.
    parsed, issues = validate_paths([write(tmp_path, text)])
    assert issues == []
    assert parsed.counts()["personas"] == 2


def test_an_oversized_catalog_document_is_refused(tmp_path: Path) -> None:
    text = "personas: []\n# " + "x" * 4_000_001 + "\n"
    (problem,) = errors(tmp_path, text)
    assert "split it into several files" in problem


# Seed 004's custom configuration, verbatim, put where a migrating user puts
# it: the provider's settings. Once accepted and ignored (the call went to the
# public OpenAI endpoint), it is now read; its literal key is refused.
VANTIQ_CONFIGURATION = {
    "class_name": "vantiq.llms.ChatOpenAI",
    "model_name": "llama3.2:latest",
    "openai_api_base": "http://localhost:11434/v1",
    "openai_api_key": "unused",
}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"openai_api_base": "http://localhost:11434/v1"}, "write the provider field base_url"),
        # The guide's Ollama configuration: its literal "unused" key is refused
        # (keys are @secrets references); the rest is read (test_vantiq_class_name.py).
        (VANTIQ_CONFIGURATION, "settings.openai_api_key: must be a @secrets(NAME) reference"),
        ({"temprature": 0.2}, "kind 'openai-compatible' takes api"),
        ({"azure_deployment": "gpt"}, "write settings.deployment"),
    ],
)
def test_unknown_provider_settings_are_refused_with_what_to_write(
    tmp_path: Path, settings: dict[str, object], message: str
) -> None:
    import json

    text = json.dumps(
        {"providers": [{"code": "OLMA", "kind": "openai-compatible", "settings": settings}]}
    )
    problems = errors(tmp_path, text)
    assert any(message in problem for problem in problems), problems


def test_known_provider_settings_still_pass(tmp_path: Path) -> None:
    text = """
    providers:
      - {code: AZ, kind: azure, base_url: "https://x.openai.azure.com",
         settings: {api_version: "2024-10-21", deployment: gpt}}
      - {code: SM, kind: sagemaker, settings: {format: jumpstart, region: us-east-1}}
    """
    assert errors(tmp_path, text) == []


def test_the_guides_message_format_config_is_a_sagemaker_setting(tmp_path: Path) -> None:
    import json

    falcon = {
        "request_key": "inputs",
        "request_parameters_key": "parameters",
        "response_path": "0.generated_text",
    }
    ok = {"code": "SM", "kind": "sagemaker", "settings": {"message_format_config": falcon}}
    assert errors(tmp_path, json.dumps({"providers": [ok]})) == []
    typo = {**falcon, "response_paht": "x"}
    bad = {"code": "SM", "kind": "sagemaker", "settings": {"message_format_config": typo}}
    problems = errors(tmp_path, json.dumps({"providers": [bad]}))
    assert any("message_format_config.response_paht is not a key" in p for p in problems)


def test_a_script_limit_on_another_kind_of_tool(tmp_path: Path) -> None:
    assert errors(
        tmp_path,
        """
        tools:
          - code: WEB
            name: web
            kind: rest
            settings: {url: "https://example.com", max_processes: 4}
        """,
    ) == ["c.yaml:2: tool 'WEB': -: settings.max_processes is a setting of script tools only"]


@pytest.mark.parametrize(
    ("setting", "url", "rule"),
    [
        (
            "url",
            "https://api.example.com/items/{id:>4000000000}",
            "template field '{id:>4000000000}' must be a plain name; "
            "write '{id}' (no conversion or format spec)",
        ),
        (
            "url",
            "https://api.example.com/items/{id!r}",
            "template field '{id!r}' must be a plain name; "
            "write '{id}' (no conversion or format spec)",
        ),
        (
            "url",
            "https://api.example.com/{id.__class__}",
            "template field '{id.__class__}' must be a name",
        ),
        (
            "base_url",
            "https://{host:>99999999}.example.com",
            "template field '{host:>99999999}' must be a plain name; "
            "write '{host}' (no conversion or format spec)",
        ),
    ],
)
def test_a_rest_url_template_field_that_is_not_a_plain_name_is_refused_when_written(
    tmp_path: Path, setting: str, url: str, rule: str
) -> None:
    # Filled with str.format when called: a width would build a string of
    # that many characters in the server; refused before it is stored.
    import json

    tool = {"code": "GET_ITEM", "name": "get_item", "kind": "rest", "settings": {setting: url}}
    assert errors(tmp_path, json.dumps({"tools": [tool]})) == [
        f"c.yaml:1: tool 'GET_ITEM': settings.{setting}: {rule}"
    ]


def test_plain_rest_url_template_fields_are_valid(tmp_path: Path) -> None:
    assert (
        errors(
            tmp_path,
            """
        tools:
          - code: GET_ITEM
            name: get_item
            kind: rest
            settings: {url: "https://api.example.com/items/{id}?q={q-1}"}
        """,
        )
        == []
    )
