"""pilothouse's chat handler for llama-cpp-python's OpenAI-compatible server.

llama-cpp-python 0.3.36's ``chatml-function-calling`` handler samples a text
answer under a grammar that only allows a tool name or the end, so a small
model that means to answer in text produces ``""`` or ``functions.x:``. This
handler replaces it, registered as ``pilothouse`` in the server process:

* **Native** templates (the GGUF's own chat template renders ``tools``, as
  Qwen2.5's does): the prompt is that template with the tools, and the model
  writes freely. Text streams out as it comes; once the model opens its
  tool-call syntax (``<tool_call>``), the call itself is sampled under a
  grammar built from the offered tools' schemas, so it is valid JSON naming
  an offered tool. An answer that is nothing but a call written as JSON is
  read as that call.
* **Prompted** templates (no tool support, as SmolLM2's): the tools are
  described in the system message, and a greedy decision under a grammar
  picks ``functions.<name>:`` or ``message:`` first; a call is then sampled
  under its schema, and a text answer freely, with no grammar left over.

``tool_choice`` follows OpenAI: absent means ``auto`` when tools are given,
``required`` and a named function force a call, ``none`` hides the tools.
``response_format`` ``json_object`` (with or without a ``schema``)
constrains a text answer. The answer is an OpenAI chat completion, streamed
or not, with ``tool_calls``, ``finish_reason`` (``stop``, ``length``,
``tool_calls``) and ``usage`` (also on the last streamed chunk).

This module runs inside the local model's server process only.
"""

from __future__ import annotations

__all__ = ["HANDLER_NAME", "chat_completion", "register"]

import json
import re
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from llama_cpp import Llama, LlamaGrammar
from llama_cpp.llama_chat_format import Jinja2ChatFormatter, LlamaChatCompletionHandlerRegistry
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from pilothouse.providers._llama_decode import Decoder, Sampling, StopFilter, seed_sampler
from pilothouse.providers._toolcall_text import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TextCall,
    calls_in_text,
    json_call,
    key_of,
    opening_name,
    written_call,
)

HANDLER_NAME = "pilothouse"

# A template without one: ChatML, which SmolLM2 and Qwen were trained on.
_CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_TOOLS_IN_TEMPLATE = re.compile(r"\btools\b")
_MAX_CALLS = 8  # parallel calls in one answer; a model looping on calls stops here
_PEEK_TOKENS = 4  # enough for a tool-call marker and the whitespace before it
_MESSAGE = "message:"
_SYSTEM_DEFAULT = "You are a helpful assistant."
# Text that cannot open with a call written as JSON (or a tool-call tag).
_TEXT_ONLY_GBNF = r"root ::= [^{\[`<\x20\t\n] [^\x00]*"


@dataclass(frozen=True)
class _Template:
    formatter: Jinja2ChatFormatter
    native: bool
    marker: str | None


_templates: weakref.WeakKeyDictionary[Llama, _Template] = weakref.WeakKeyDictionary()


def _template(llama: Llama) -> _Template:
    # Built once per loaded model: the template is part of the GGUF file.
    cached = _templates.get(llama)
    if cached is not None:
        return cached
    source = llama.metadata.get("tokenizer.chat_template") or _CHATML
    vocab = llama.tokenizer()
    eos = vocab.detokenize([llama.token_eos()], special=True).decode("utf-8", "replace")
    bos_id = llama.token_bos()
    bos = vocab.detokenize([bos_id], special=True).decode("utf-8", "replace") if bos_id >= 0 else ""
    made = _Template(
        formatter=Jinja2ChatFormatter(source, eos_token=eos, bos_token=bos),
        native=bool(_TOOLS_IN_TEMPLATE.search(source)),
        marker=TOOL_CALL_OPEN if TOOL_CALL_OPEN in source else None,
    )
    _templates[llama] = made
    return made


def register() -> None:
    """Register :func:`chat_completion` as llama-cpp-python chat format ``pilothouse``."""
    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        HANDLER_NAME, chat_completion, overwrite=True
    )


@dataclass
class _Request:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    choice: str  # none, auto, required, or the name of a forced function
    stream: bool
    stops: list[str]
    text_grammar: LlamaGrammar | None
    model_name: str
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = [t["function"]["name"] for t in self.tools]


def chat_completion(
    *,
    llama: Llama,
    messages: list[Any],
    functions: list[Any] | None = None,
    function_call: Any = None,
    tools: list[Any] | None = None,
    tool_choice: Any = None,
    temperature: float = 0.2,
    top_p: float = 0.95,
    top_k: int = 40,
    min_p: float = 0.05,
    typical_p: float = 1.0,
    stream: bool = False,
    stop: str | list[str] | None = None,
    seed: int | None = None,
    response_format: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.1,
    tfs_z: float = 1.0,
    mirostat_mode: int = 0,
    mirostat_tau: float = 5.0,
    mirostat_eta: float = 0.1,
    model: str | None = None,
    logits_processor: Any = None,
    grammar: LlamaGrammar | None = None,
    logit_bias: Mapping[str, float] | None = None,
    logprobs: bool | None = None,
    top_logprobs: int | None = None,
    **kwargs: Any,
) -> Any:
    """Answer one chat completion request (llama-cpp-python's handler protocol).

    Returns:
        An OpenAI ``chat.completion`` dict, or an iterator of
        ``chat.completion.chunk`` dicts when ``stream`` is true.

    Raises:
        ValueError: a request this handler cannot honour (log probabilities,
            logit bias, a forced tool that is not offered); the server's own
            request check answers these with HTTP 400 before they get here.
    """
    del top_logprobs, kwargs  # only meaningful with logprobs, which is refused
    if logprobs or logit_bias or logits_processor is not None:
        raise ValueError("the pilothouse chat handler does not support logprobs or logit_bias")
    offered = _offered_tools(tools, functions)
    choice = _choice(tool_choice if tool_choice is not None else function_call, offered)
    request = _Request(
        messages=[dict(m) for m in messages],
        tools=offered if choice != "none" else [],
        choice=choice,
        stream=stream,
        stops=[stop] if isinstance(stop, str) else list(stop or []),
        text_grammar=_response_grammar(response_format) or grammar,
        model_name=model or llama.model_path,
    )
    template = _template(llama)
    prompt = _render(template, request)
    prompt_tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    n_ctx = llama.n_ctx()
    if len(prompt_tokens) >= n_ctx:
        # Worded as llama-cpp-python words it: its server turns this into a 400.
        raise ValueError(
            f"Requested tokens ({len(prompt_tokens)}) exceed context window of {n_ctx}"
        )
    budget = n_ctx - len(prompt_tokens)
    if max_tokens is not None and max_tokens > 0:
        budget = min(budget, max_tokens)
    seed_sampler(llama, seed)
    sampling = Sampling(
        temp=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        typical_p=typical_p,
        repeat_penalty=repeat_penalty,
        presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty,
        tfs_z=tfs_z,
        mirostat_mode=mirostat_mode,
        mirostat_tau=mirostat_tau,
        mirostat_eta=mirostat_eta,
    )
    decoder = Decoder(llama, sampling, prompt_tokens, budget)
    answer = _Answer(decoder, template, request)
    if stream:
        return _chunks(answer, request.model_name)
    return _completion(answer, request.model_name)


def _offered_tools(tools: list[Any] | None, functions: list[Any] | None) -> list[dict[str, Any]]:
    if tools:
        return [cast("dict[str, Any]", t) for t in tools]
    # The legacy `functions` field, as OpenAI still accepts it.
    return [{"type": "function", "function": f} for f in functions or []]


def _choice(tool_choice: Any, offered: list[dict[str, Any]]) -> str:
    if not offered or tool_choice == "none":
        return "none"
    if tool_choice is None or tool_choice == "auto":
        return "auto"  # OpenAI's default when tools are given
    if tool_choice == "required":
        return "required"
    if isinstance(tool_choice, dict):
        name = key_of(key_of(cast("object", tool_choice), "function"), "name")
        names = [t["function"]["name"] for t in offered]
        if isinstance(name, str) and name in names:
            return name
        raise ValueError(f"tool_choice names {name!r}, which is not among the tools: {names}")
    raise ValueError(f"tool_choice {tool_choice!r} is not none, auto, required or a function")


def _response_grammar(response_format: Mapping[str, Any] | None) -> LlamaGrammar | None:
    if response_format is None or response_format.get("type") != "json_object":
        return None
    schema = response_format.get("schema")
    if schema:
        return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    return LlamaGrammar.from_string(JSON_GBNF, verbose=False)


# -- prompts -------------------------------------------------------------------


def _role(message: Mapping[str, Any]) -> Any:
    # OpenAI's newer name for the system role; chat templates know only `system`.
    role = message.get("role")
    return "system" if role == "developer" else role


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # A list of content parts: only text parts can reach a text-only model.
    parts = cast("list[Any]", content)
    return "".join(str(key_of(p, "text") or "") for p in parts)


def _arguments_object(arguments: Any) -> Any:
    # Chat templates render arguments with `tojson`; a JSON string would come
    # out double-encoded, so hand them the object.
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return arguments


def _render(template: _Template, request: _Request) -> str:
    if template.native:
        messages = _native_messages(request.messages)
        tools = request.tools or None
    else:
        messages = _prompted_messages(request.messages, request.tools)
        tools = None
    # The formatter is typed with llama-cpp-python's TypedDicts; ours are dicts.
    result = template.formatter(messages=cast("Any", messages), tools=cast("Any", tools))
    return result.prompt


def _native_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        entry = dict(message)
        entry["role"] = _role(message)
        entry["content"] = _content_text(message.get("content"))
        calls = message.get("tool_calls")
        if calls:
            entry["tool_calls"] = [
                {
                    **call,
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": _arguments_object(call["function"].get("arguments")),
                    },
                }
                for call in calls
            ]
        out.append(entry)
    return out


def _tool_prompt(tools: Sequence[dict[str, Any]]) -> str:
    lines = ["You can call these functions:"]
    for tool in tools:
        function = tool["function"]
        description = function.get("description") or ""
        parameters: Any = function.get("parameters") or {"type": "object", "properties": {}}
        lines.append(f"\nfunctions.{function['name']}: {description}".rstrip())
        lines.append(json.dumps(parameters, ensure_ascii=False))
    lines.append(
        "\nCall a function only when the request needs it. To call one, begin with "
        "'functions.<function_name>:' and put its JSON arguments on the next line. "
        f"To answer in text, begin with '{_MESSAGE}'."
    )
    return "\n".join(lines)


def _prompted_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Messages for a template that knows no tools: calls and results become text."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool_call_id -> function name
    for message in messages:
        role = _role(message)
        content = _content_text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            written: list[str] = [content] if content else []
            for call in message["tool_calls"]:
                function = call["function"]
                names[str(call.get("id"))] = function["name"]
                arguments = _arguments_object(function.get("arguments"))
                written.append(f"functions.{function['name']}:\n{json.dumps(arguments)}")
            out.append({"role": "assistant", "content": "\n".join(written)})
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), message.get("name") or "a function")
            out.append({"role": "user", "content": f"Result of functions.{name}:\n{content}"})
        else:
            out.append({"role": role, "content": content})
    if tools:
        prompt = _tool_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": f"{_SYSTEM_DEFAULT}\n\n{prompt}"})
    return out


# -- grammars ------------------------------------------------------------------


def _call_grammar(tools: Sequence[dict[str, Any]], name: str | None = None) -> LlamaGrammar:
    """A grammar for ``{"name": <an offered tool>, "arguments": <its schema>}``."""
    chosen = [t for t in tools if name is None or t["function"]["name"] == name]

    def schema(strict: bool) -> dict[str, Any]:
        alternatives = [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    "arguments": (t["function"].get("parameters") if strict else None)
                    or {"type": "object"},
                },
                "required": ["name", "arguments"],
            }
            for t in chosen
        ]
        return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}

    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema(True)))
    except Exception:  # a schema feature the converter lacks
        # The call is still valid JSON naming an offered tool; the run loop
        # validates the arguments against the schema and feeds errors back.
        gbnf = json_schema_to_gbnf(json.dumps(schema(False)))
    return LlamaGrammar.from_string(gbnf, verbose=False)


def _arguments_grammar(tool: dict[str, Any]) -> LlamaGrammar:
    parameters = tool["function"].get("parameters") or {"type": "object"}
    try:
        return LlamaGrammar.from_json_schema(json.dumps(parameters), verbose=False)
    except Exception:  # a schema feature the converter lacks: any JSON object
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)


def _choice_grammar(names: Sequence[str], allow_text: bool) -> LlamaGrammar:
    options = [json.dumps(f"functions.{n}:") for n in names]
    if allow_text:
        options.append(json.dumps(_MESSAGE))
    return LlamaGrammar.from_string(f"root ::= {' | '.join(options)}", verbose=False)


# -- answers -------------------------------------------------------------------


@dataclass
class _Answer:
    """Produces one answer as events: text pieces, then the calls, if any."""

    decoder: Decoder
    template: _Template
    request: _Request
    calls: list[TextCall] = field(default_factory=list[TextCall])
    finish: str = "stop"

    def text(self) -> Iterator[str]:
        """Yield the answer's text; afterwards ``calls`` and ``finish`` are set."""
        request = self.request
        if request.choice == "none":
            yield from self._free_text(self.decoder.prompt, request.text_grammar)
        elif self.template.native:
            yield from self._native()
        else:
            yield from self._prompted()
        if self.calls:
            self.finish = "tool_calls"
        else:
            self.finish = self.decoder.finish

    def _free_text(self, context: list[int], grammar: LlamaGrammar | None) -> Iterator[str]:
        stops = StopFilter(self.request.stops)
        for piece in self.decoder.run(context, grammar=grammar):
            out = stops.feed(piece)
            if out:
                yield out
            if stops.stopped:
                self.decoder.finish = "stop"
                return
        rest = stops.flush()
        if rest:
            yield rest

    # Native templates: the model's own syntax, constrained once a call opens.

    def _native(self) -> Iterator[str]:
        request, decoder = self.request, self.decoder
        marker = self.template.marker or ""
        if request.choice != "auto":
            self._native_calls("", forced=request.choice)
            return
        if request.text_grammar is not None:
            # The text must follow a grammar, which a call would break: peek
            # first, then either call or answer under the grammar.
            peek = decoder.text(decoder.prompt, greedy=True, limit=_PEEK_TOKENS)
            if marker and peek.lstrip().startswith(marker):
                self._native_calls("")
            else:
                decoder.rewind()  # the peek is not the answer
                yield from self._free_text(decoder.prompt, request.text_grammar)
            return
        yield from self._native_auto(marker)

    def _native_auto(self, marker: str) -> Iterator[str]:
        stops = StopFilter(self.request.stops)
        watch = _Watch(marker, self.request.names)
        emitted: list[str] = []
        for piece in self.decoder.run(self.decoder.prompt):
            out = stops.feed(watch.feed(piece))
            if out:
                emitted.append(out)
                yield out
            if stops.stopped:
                self.decoder.finish = "stop"
                return
            if watch.state in ("call", "stray"):
                break
        if watch.state == "call":
            self._native_calls("".join(emitted))
        elif watch.state == "stray":
            # A call to a tool that is not offered (small models invent one
            # for requests no tool fits): answer in text instead.
            self.decoder.rewind()
            grammar = LlamaGrammar.from_string(_TEXT_ONLY_GBNF, verbose=False)
            yield from self._free_text(self.decoder.prompt, grammar)
        elif not (watch.state == "json" and self._json_calls(watch.pending)):
            rest = stops.feed(watch.pending) + stops.flush()
            if rest:
                yield rest

    def _json_calls(self, text: str) -> bool:
        """Take an answer written as JSON as calls, if it is calls; tell whether it was."""
        names = self.request.names
        calls = calls_in_text(text, names)
        if calls:
            self.calls = calls[:_MAX_CALLS]
            return True
        first = written_call(text)
        if first is not None and first.name in names:
            # A call followed by more text (a small model echoing a result
            # after it) is still that call.
            self.calls = [first]
            return True
        return False

    def _native_calls(self, before: str, forced: str | None = None) -> None:
        """Sample calls after the marker, each under the offered tools' grammar."""
        decoder, marker = self.decoder, self.template.marker
        name = forced if forced not in (None, "auto", "required") else None
        grammar = _call_grammar(self.request.tools, name)
        opening = f"{marker}\n" if marker else ""
        written = before + opening
        for _ in range(_MAX_CALLS):
            context = decoder.prompt + decoder.tokenize(written)
            body = decoder.text(context, grammar=grammar)
            if decoder.finish == "length":
                return  # a cut-off call is no call: the answer ends with `length`
            call = json_call(json.loads(body))
            if call is None:  # the grammar only produces calls
                raise AssertionError(f"grammar produced a non-call: {body!r}")
            self.calls.append(call)
            written += body.strip() + (f"\n{TOOL_CALL_CLOSE}" if marker else "")
            if name is not None or not marker:
                return  # a named function is called once; without a marker, one call
            follow = decoder.text(
                decoder.prompt + decoder.tokenize(written), greedy=True, limit=_PEEK_TOKENS
            )
            if not follow.lstrip().startswith(marker):
                return
            written += "\n" + opening

    # Prompted templates: a constrained decision first, then a free answer.

    def _prompted(self) -> Iterator[str]:
        request, decoder = self.request, self.decoder
        if request.choice in ("auto", "required"):
            grammar = _choice_grammar(request.names, allow_text=request.choice == "auto")
            decision = decoder.text(decoder.prompt, grammar=grammar, greedy=True)
            if decoder.finish == "length":
                return
            chosen = decision.removeprefix("functions.").removesuffix(":")
        else:
            decision, chosen = f"functions.{request.choice}:", request.choice
        if decision == _MESSAGE:
            context = decoder.prompt + decoder.tokenize(_MESSAGE)
            yield from _lstripped(self._free_text(context, request.text_grammar))
            return
        tool = next(t for t in request.tools if t["function"]["name"] == chosen)
        context = decoder.prompt + decoder.tokenize(f"functions.{chosen}:\n")
        body = decoder.text(context, grammar=_arguments_grammar(tool))
        if decoder.finish == "length":
            return
        call = json_call({"name": chosen, "arguments": json.loads(body)})
        if call is None:  # the grammar only produces objects
            raise AssertionError(f"grammar produced non-object arguments: {body!r}")
        self.calls.append(call)


@dataclass
class _Watch:
    """Reads a free answer as it streams: text, a call in the model's syntax, or JSON.

    States: ``start`` (only whitespace or what may become the marker so
    far), ``text`` (streams out, until the marker shows up), ``call`` (the
    marker opened a call), ``json`` (the answer opens like a call written as
    JSON: held until its end), ``stray`` (a JSON call naming no offered tool).
    """

    marker: str
    names: list[str]
    state: str = "start"
    pending: str = ""

    def feed(self, piece: str) -> str:
        """Take a piece of the answer; return the part that is certainly text."""
        self.pending += piece
        if self.state == "start":
            self._classify()
        if self.state == "json":
            name = opening_name(self.pending)
            if name is not None and name not in self.names:
                self.state = "stray"
            return ""
        if self.state != "text":
            return ""
        if self.marker and self.marker in self.pending:
            before = self.pending.split(self.marker, 1)[0]
            self.pending, self.state = "", "call"
            return before
        keep = _held_back(self.pending, self.marker)
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep :]
        return out

    def _classify(self) -> None:
        head, marker = self.pending.lstrip(), self.marker
        if not head or (marker and marker.startswith(head) and head != marker):
            return  # may still become the marker
        if marker and head.startswith(marker):
            self.pending, self.state = "", "call"
        else:
            self.state = "json" if head[0] in "{[`" else "text"


def _held_back(text: str, marker: str) -> int:
    # How much of the end of text could be the start of the marker.
    if not marker:
        return 0
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def _lstripped(pieces: Iterator[str]) -> Iterator[str]:
    started = False
    for piece in pieces:
        if not started:
            piece = piece.lstrip()
            started = bool(piece)
        if piece:
            yield piece


# -- OpenAI shapes ---------------------------------------------------------------


def _tool_calls(calls: Sequence[TextCall], *, indexed: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        entry: dict[str, Any] = {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json()},
        }
        if indexed:
            entry = {"index": index, **entry}
        out.append(entry)
    return out


def _usage(decoder: Decoder) -> dict[str, int]:
    prompt = len(decoder.prompt)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": decoder.completion_tokens,
        "total_tokens": prompt + decoder.completion_tokens,
    }


def _completion(answer: _Answer, model_name: str) -> dict[str, Any]:
    text = "".join(answer.text())
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if answer.calls:
        message["tool_calls"] = _tool_calls(answer.calls, indexed=False)
    elif not text:
        message["content"] = ""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish}
        ],
        "usage": _usage(answer.decoder),
    }


def _chunks(answer: _Answer, model_name: str) -> Iterator[dict[str, Any]]:
    ident = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model_name,
            "choices": [choice],
            **extra,
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in answer.text():
        yield chunk({"content": piece})
    if answer.calls:
        yield chunk({"tool_calls": _tool_calls(answer.calls, indexed=True)})
    yield chunk({}, answer.finish, usage=_usage(answer.decoder))
