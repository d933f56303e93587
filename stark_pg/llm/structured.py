"""Structured replies: JSON found in an LLM's text, validated by a pydantic model.

Small models wrap JSON in ``` fences, put a sentence before it, or answer a bare number; the
parser takes the whole text as JSON if it is, else the first fenced block, else the first JSON
object or array in the text. What fails to parse or validate comes back as a short error the
repair request shows the model.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ValidationError

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class ReplyError(ValueError):
    """The reply is not usable; the message is meant for the model's repair request."""


def extract_json(text: str):
    """The JSON value in an LLM reply, or ReplyError saying why there is none."""
    stripped = text.strip()
    if not stripped:
        raise ReplyError("the reply was empty")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(stripped):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(stripped) if ch in "{["]
    for start in starts:
        try:
            value, _ = decoder.raw_decode(stripped, start)
            return value
        except json.JSONDecodeError:
            continue
    raise ReplyError("the reply holds no JSON value")


def parse_reply(text: str, model: type[BaseModel]):
    """The reply as an instance of `model`, or ReplyError with the validation errors."""
    data = extract_json(text)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()[:5])
        raise ReplyError(f"the JSON does not fit the schema ({problems})") from None


def schema_text(model: type[BaseModel]) -> str:
    """The model's JSON schema, compact, for prompts."""
    return json.dumps(model.model_json_schema(), separators=(",", ":"))


def repair_messages(messages: list[dict], reply: str, error: str, model: type[BaseModel]) -> list[dict]:
    """The conversation so far plus the bad reply and a request to answer again, fixed."""
    return [*messages, {"role": "assistant", "content": reply},
            {"role": "user", "content": f"That reply cannot be used: {error}. Answer again with only a JSON value "
                                        f"matching this JSON schema and no other text:\n{schema_text(model)}"}]
