"""View code: a playground prompt as a program would send it.

For each prompt the chat offers the same call through the other faces:
``curl`` against the REST API (or ``/v1/invoke`` for a bare model), Python
with ``pilothouse.api``, Python with the ``openai`` client (actions and
agents: the OpenAI-compatible face names them ``action:X`` / ``agent:X``),
and the ``/v1/invoke`` body. The key is never written out: the samples read
``PILOTHOUSE_KEY`` from the environment.
"""

from __future__ import annotations

__all__ = ["code_samples"]

import json
from typing import Any


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _py(value: Any) -> str:
    return repr(value)


def code_samples(
    base_url: str,
    target: str,
    text: str,
    input_data: dict[str, Any] | None,
    *,
    action: str | None = None,
    model: str | None = None,
) -> list[tuple[str, str]]:
    """The samples (label, code) that send ``text`` to ``target`` as the playground did.

    Args:
        base_url: the service's address as the browser reached it.
        target: ``action:X``, ``agent:X`` or ``model:X``.
        text: the prompt.
        input_data: the template's placeholder values sent with it, if any.
        action: the action an agent runs (its goal action).
        model: the catalog model the action calls (for the ``/v1/invoke`` body).
    """
    kind, _, code = target.partition(":")
    url = base_url.rstrip("/")
    auth = '-H "Authorization: Bearer $PILOTHOUSE_KEY" -H "Content-Type: application/json"'
    invoke: dict[str, Any] = {
        "agentName": "playground",
        "model": code if kind == "model" else model,
        "message": text,
    }
    invoke_json = json.dumps(invoke, ensure_ascii=False, indent=2)
    samples: list[tuple[str, str]] = []
    if kind == "model":
        samples.append(
            (
                "curl",
                f"curl {url}/v1/invoke {auth} \\\n"
                f"  -d {_shell_quote(json.dumps(invoke, ensure_ascii=False))}",
            )
        )
        samples.append(
            (
                "Python (pilothouse)",
                "from pilothouse.api import Pilothouse\n"
                "from pilothouse.types import AdHocRun\n\n"
                "async with Pilothouse() as ph:\n"
                f"    result = await ph.command.run_adhoc(\n"
                f"        AdHocRun(name='playground', model={_py(code)}, message={_py(text)})\n"
                "    )\n"
                "    print(result.output)",
            )
        )
        samples.append(
            (
                "Python (openai)",
                "# The OpenAI-compatible face serves actions and agents (model='action:CODE');\n"
                "# a bare model is reached through /v1/invoke, as above.",
            )
        )
    else:
        start: dict[str, Any] = {"action": action or code}
        if kind == "agent":
            start["agent"] = code
        message: dict[str, Any] = {"text": text}
        if input_data:
            message["inputData"] = input_data
        samples.append(
            (
                "curl",
                f"UUID=$(curl -s {url}/v1/conversations {auth} \\\n"
                f"  -d {_shell_quote(json.dumps(start))} | jq -r .uuid)\n"
                f"curl {url}/v1/conversations/$UUID/messages {auth} \\\n"
                f"  -d {_shell_quote(json.dumps(message, ensure_ascii=False))}",
            )
        )
        extra = f", input_data={_py(input_data)}" if input_data else ""
        samples.append(
            (
                "Python (pilothouse)",
                "from pilothouse.api import Pilothouse\n\n"
                "async with Pilothouse() as ph:\n"
                "    conversation = await ph.command.start_conversation(\n"
                f"        {', '.join(f'{k}={_py(v)}' for k, v in start.items())}\n"
                "    )\n"
                "    result = await ph.command.send_message(\n"
                f"        conversation.uuid, {_py(text)}{extra}\n"
                "    )\n"
                "    print(result.output)",
            )
        )
        samples.append(
            (
                "Python (openai)",
                "import os\n\nfrom openai import OpenAI\n\n"
                f"client = OpenAI(base_url={_py(url + '/v1')}, "
                "api_key=os.environ['PILOTHOUSE_KEY'])\n"
                "answer = client.chat.completions.create(\n"
                f"    model={_py(target)},\n"
                f"    messages=[{{'role': 'user', 'content': {_py(text)}}}],\n"
                ")\n"
                "print(answer.choices[0].message.content)",
            )
        )
    if invoke["model"]:
        # /v1/invoke runs a model without the catalog's action: the same model and text.
        samples.append(("/v1/invoke body", invoke_json))
    return samples
