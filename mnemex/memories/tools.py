"""The tools a model may call: ``search_memory_tool`` (recall; memories come back
formatted by ``memories.context``, fenced so they are never extracted again) and
``remember`` ("remember that ..."; stored with importance 0.9), and the function
that runs their calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from mnemex.config import DEFAULT, UseDefault
from mnemex.errors import InvalidInput
from mnemex.memories.context import fenced, format_as_context
from mnemex.memories.protocol import SearchMode

if TYPE_CHECKING:
    from mnemex.memories.ref import ScopeRef

__all__ = ["MEMORY_TOOLS", "REMEMBER_IMPORTANCE", "REMEMBER_TOOL", "SEARCH_MEMORY_TOOL",
           "execute_memory_tool"]

T = TypeVar("T")

REMEMBER_IMPORTANCE: Final = 0.9
"""The importance of what a model stores through the ``remember`` tool."""


# -- a tool for models ---------------------------------------------------------------------------
SEARCH_MEMORY_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "search_memory_tool",
        "description": (
            "Search and recall relevant memories about the user. Use this tool when you need to "
            "personalize your response based on user preferences, recall something the user mentioned "
            "before, or reference past interactions."),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string",
                          "description": "What to look for in the user's memories, in plain words."},
                "top_k": {"type": "integer", "minimum": 1, "maximum": 50,
                          "description": "How many memories to return (default 5)."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


REMEMBER_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "remember",
        "description": (
            "Store a fact about the user for later conversations, when the user asks you to remember "
            "something or states something durable about themselves (a preference, a plan, a detail of "
            "their life). Write it as one short, self-contained sentence about the user."),
        "parameters": {
            "type": "object",
            "properties": {
                "content": {"type": "string",
                            "description": "The fact, e.g. 'The user is allergic to peanuts.'"},
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    },
}

MEMORY_TOOLS: Final[list[dict[str, Any]]] = [SEARCH_MEMORY_TOOL, REMEMBER_TOOL]
"""Both tools, as a chat completions request's ``tools`` takes them."""


class _RememberArguments(msgspec.Struct, forbid_unknown_fields=True):
    content: str


class _ToolArguments(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    top_k: int = 5


_decode_arguments = msgspec.json.Decoder(_ToolArguments)
_decode_remember = msgspec.json.Decoder(_RememberArguments)


async def execute_memory_tool(scope: ScopeRef, tool_call: Mapping[str, Any] | str, *,
                              mode: SearchMode | UseDefault = DEFAULT) -> dict[str, Any]:
    """Run a model's call of ``search_memory_tool`` or ``remember`` against ``scope``.
    ``tool_call`` is the call as the model returned it (``{"id", "function": {"name",
    "arguments"}}``) or just the arguments of a search (a JSON string or a dict).
    Returns the tool message to append to the conversation: ``{"role": "tool",
    "tool_call_id", "content"}``; for a search, content as format_as_context gives it
    (or a line saying nothing was found), for ``remember`` what was stored."""
    call_id: str | None = None
    arguments: Any = tool_call
    name: Any = "search_memory_tool"
    if isinstance(tool_call, Mapping) and "function" in tool_call:
        call_id = tool_call.get("id")
        function = tool_call.get("function") or {}
        name = function.get("name") if isinstance(function, Mapping) else None
        if name not in ("search_memory_tool", "remember"):
            raise InvalidInput(f"tool call is for {name!r}, not search_memory_tool or remember",
                               field="function.name")
        arguments = function.get("arguments") if isinstance(function, Mapping) else None
    if name == "remember":
        content = await _remember(scope, _arguments(arguments, _RememberArguments, _decode_remember, name))
    else:
        parsed = _arguments(arguments, _ToolArguments, _decode_arguments, "search_memory_tool")
        top_k = max(1, min(parsed.top_k, 50))
        result = await scope.search(parsed.query, top_k, mode=mode)
        content = format_as_context(result.hits) or fenced("[User Memory]\n(nothing relevant is remembered)")
    message: dict[str, Any] = {"role": "tool", "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def _arguments(arguments: Any, shape: type[T], decoder: msgspec.json.Decoder[T], tool: str) -> T:
    try:
        if isinstance(arguments, str | bytes):
            return decoder.decode(arguments)
        if isinstance(arguments, Mapping):
            return msgspec.convert(dict(arguments), shape)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidInput(f"{tool} arguments: {exc}", field="arguments") from exc
    raise InvalidInput(f"tool arguments must be a JSON object, got {type(arguments).__name__}",
                       field="arguments")


async def _remember(scope: ScopeRef, arguments: _RememberArguments) -> str:
    memory_id = await scope.remember(arguments.content, importance=REMEMBER_IMPORTANCE,
                                     source="remember_tool", attributed_to="user")
    return f"Remembered ({memory_id}): {' '.join(arguments.content.split())}"
