"""A ``search_memory_tool`` a model may call, and the function that runs its calls
(memories come back formatted by ``memories.context``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mnemex.config import DEFAULT, UseDefault
from mnemex.errors import InvalidInput
from mnemex.memories.context import format_as_context
from mnemex.memories.protocol import SearchMode

if TYPE_CHECKING:
    from mnemex.memories.ref import ScopeRef

__all__ = ["SEARCH_MEMORY_TOOL", "execute_memory_tool"]


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


class _ToolArguments(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    top_k: int = 5


_decode_arguments = msgspec.json.Decoder(_ToolArguments)


async def execute_memory_tool(scope: ScopeRef, tool_call: Mapping[str, Any] | str, *,
                              mode: SearchMode | UseDefault = DEFAULT) -> dict[str, Any]:
    """Run a model's call of ``search_memory_tool`` against ``scope``. ``tool_call`` is
    the call as the model returned it (``{"id", "function": {"name", "arguments"}}``)
    or just its arguments (a JSON string or a dict). Returns the tool message to
    append to the conversation: ``{"role": "tool", "tool_call_id", "content"}``,
    content as format_as_context gives it (or a line saying nothing was found)."""
    call_id: str | None = None
    arguments: Any = tool_call
    if isinstance(tool_call, Mapping) and "function" in tool_call:
        call_id = tool_call.get("id")
        function = tool_call.get("function") or {}
        name = function.get("name") if isinstance(function, Mapping) else None
        if name != "search_memory_tool":
            raise InvalidInput(f"tool call is for {name!r}, not search_memory_tool", field="function.name")
        arguments = function.get("arguments") if isinstance(function, Mapping) else None
    try:
        if isinstance(arguments, str | bytes):
            parsed = _decode_arguments.decode(arguments)
        elif isinstance(arguments, Mapping):
            parsed = msgspec.convert(dict(arguments), _ToolArguments)
        else:
            raise InvalidInput(f"tool arguments must be a JSON object, got {type(arguments).__name__}",
                               field="arguments")
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidInput(f"search_memory_tool arguments: {exc}", field="arguments") from exc
    top_k = max(1, min(parsed.top_k, 50))
    result = await scope.search(parsed.query, top_k, mode=mode)
    content = format_as_context(result.hits) or "[User Memory]\n(nothing relevant is remembered)"
    message: dict[str, Any] = {"role": "tool", "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message
