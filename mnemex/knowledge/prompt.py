"""The extraction prompt: what one LLM call is shown and what it is asked to answer.

``extraction_messages`` turns an ``ExtractionRequest`` into two chat messages: a
fixed system message (the instructions and the answer's shape; the same for every
call, so a server's prompt cache can keep it) and a user message with the parts of
this job: the observation time, the category catalog, the offered memories as
``[n] text``, the preceding messages marked as context only, and the new messages,
each as ``#position role (speaker)``. ``EXTRACTION_SCHEMA`` is the JSON Schema of
the answer, sent as structured output where the server takes it.

Pure functions, no I/O. ``PROMPT_VERSION`` changes whenever what the model is asked
changes; it is part of the extractor's name, so every memory records which prompt
made it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from mnemex._time import iso
from mnemex.knowledge.facts import ExtractionRequest, SourceMessage, strip_injected

__all__ = ["ENTITY_TYPES", "EXTRACTION_SCHEMA", "PROMPT_VERSION", "extraction_messages", "shown_messages"]

PROMPT_VERSION: Final = "x3"

MAX_MESSAGE_CHARS: Final = 6000
"""Longest message text shown; longer ones (pasted documents, tool output) are cut."""

_FACT_KINDS: Final = ("fact", "preference", "event", "plan", "relationship")
ENTITY_TYPES: Final = ("person", "place", "organisation", "event", "object", "pet", "other")
"""The types an extractor gives the entities a fact names (the entity graph's types)."""

EXTRACTION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string",
                                "description": "One short self-contained third-person sentence."},
                    "kind": {"type": "string", "enum": list(_FACT_KINDS)},
                    "categories": {"type": "array", "items": {"type": "string"}},
                    "confidences": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}},
                    "importance": {"type": "number", "minimum": 0, "maximum": 1},
                    "entities": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"},
                                       "type": {"type": "string", "enum": list(ENTITY_TYPES)}},
                        "required": ["name", "type"], "additionalProperties": False}},
                    "relation": {"type": ["string", "null"],
                                 "enum": ["duplicate", "updates", "extends", None]},
                    "target": {"type": ["integer", "null"]},
                    "relations": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"source": {"type": "string"},
                                       "type": {"type": "string",
                                                "description": "A verb phrase in snake_case: owes, "
                                                               "lives_in, works_for, sibling_of."},
                                       "target": {"type": "string"}},
                        "required": ["source", "type", "target"], "additionalProperties": False}},
                    "attributed_to": {"type": ["string", "null"]},
                    "actor_id": {"type": ["string", "null"]},
                    "valid_at": {"type": ["string", "null"], "description": "ISO 8601, or null."},
                    "messages": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["content", "kind", "categories", "confidences", "importance", "entities",
                             "relations", "relation", "target", "attributed_to", "actor_id", "valid_at",
                             "messages"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["facts"],
    "additionalProperties": False,
}
"""The JSON Schema of an answer: ``{"facts": [{content, kind, categories, confidences,
importance, entities, relations, relation, target, attributed_to, actor_id, valid_at,
messages}]}``."""

_SYSTEM: Final = """\
You extract long-term memories from a conversation between a user and an AI assistant.

Extract durable facts about the user and the people, places, pets, organisations and things in \
their life: who they are, where they live and work, their relationships, preferences and dislikes, \
habits, plans, goals, health, possessions and the events that matter to them. Take them mostly from \
what the USER says. The assistant's messages are context: never extract what the assistant merely \
repeats, suggests, asks or assumes, unless the user confirms it. Extract only from the new messages; \
the earlier messages are there to help you understand them.

Skip greetings, small talk, questions, requests for help, hypotheticals, jokes and whatever is true \
only for this moment of the conversation. When nothing is worth remembering, answer no facts.

Write each fact as one short sentence in the third person that makes sense on its own, without the \
conversation: "The user lives in Berlin.", "The user's sister Anna is a nurse." Call the user "the \
user"; name everyone else. Resolve pronouns, and turn relative times ("last year", "tomorrow") into \
dates using the time of the messages. One fact per sentence; never the same fact twice.

For each fact give:
- content: the sentence.
- kind: fact, preference, event, plan or relationship.
- categories: the names of the catalog's categories the fact belongs to (none when there is no \
catalog or nothing fits), and confidences: how sure you are of each, 0 to 1, as many as categories.
- importance: 0 to 1; about 0.9 for identity, health and close relationships, 0.5 for ordinary \
facts and preferences, 0.2 for trivia.
- entities: the people, places, organisations and things the fact mentions (not "the user"), each \
as {"name": ..., "type": ...} with type person, place, organisation, event, object, pet or other.
- relations: how the fact says two of its entities relate, each as {"source": name, "type": verb \
phrase in snake_case, "target": name}, with names as in entities ("Gandros owes the party a favour": \
{"source": "Gandros", "type": "owes_favour_to", "target": "the party"}); [] when it states none.
- relation and target: when the fact is about the same thing as one of the known memories, relation \
is "duplicate" (it says the same), "updates" (it changes or contradicts it; the new fact is the \
current one) or "extends" (it adds detail to it), and target is that memory's number [n]. Otherwise \
both are null. Use only the numbers shown.
- attributed_to: whom the fact is about: "user", or the person's name.
- actor_id: when the fact concerns one character other than the user (a person in their life, a \
character of their story or game, an agent), that character's name as in entities; otherwise null.
- valid_at: when the fact became true, as an ISO 8601 date or time, when the messages say so; \
otherwise null.
- messages: the numbers (#n) of the new messages the fact comes from.

Answer with one JSON object and nothing else, in this shape:
{"facts": [{"content": "The user lives in Berlin.", "kind": "fact", "categories": [], \
"confidences": [], "importance": 0.7, "entities": [{"name": "Berlin", "type": "place"}], \
"relations": [], "relation": null, "target": null, "attributed_to": "user", "actor_id": null, \
"valid_at": null, "messages": [3]}]}
With nothing to remember, answer {"facts": []}."""


def shown_messages(messages: Iterable[SourceMessage]) -> list[SourceMessage]:
    """The messages the prompt shows: system messages left out, memory blocks mnemex
    injected removed from the text, and what is left empty dropped."""
    shown: list[SourceMessage] = []
    for message in messages:
        if message.role == "system":
            continue
        text = strip_injected(message.text).strip()
        if text:
            shown.append(message if text == message.text else _with_text(message, text))
    return shown


def _with_text(message: SourceMessage, text: str) -> SourceMessage:
    return SourceMessage(message.position, message.role, text, speaker=message.speaker, time=message.time)


def _message_block(message: SourceMessage) -> str:
    who = f"{message.role} ({message.speaker})" if message.speaker else message.role
    when = f", {iso(int(message.time))}" if message.time > 0 else ""
    text = message.text.strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS].rstrip() + " [...]"
    return f"#{message.position} {who}{when}:\n{text}"


def extraction_messages(request: ExtractionRequest) -> list[dict[str, str]]:
    """The system and user chat messages of one extraction call (see the module doc)."""
    parts: list[str] = []
    observed = iso(int(request.observed_at)) if request.observed_at > 0 else "unknown"
    parts.append(f"Time of the new messages: {observed}")
    if request.categories:
        catalog = "\n".join(f"- {name}: {about}" if about else f"- {name}"
                            for name, about in request.categories.items())
    else:
        catalog = "(none: leave categories and confidences empty)"
    parts.append(f"Category catalog:\n{catalog}")
    if request.offered:
        known = "\n".join(
            f"[{memory.number}] {' '.join(memory.content.split())}"
            + (f" (noted {iso(int(memory.time))[:10]})" if memory.time > 0 else "")
            for memory in request.offered)
    else:
        known = "(none)"
    parts.append(f"Known memories (relation and target may refer to these numbers only):\n{known}")
    context = shown_messages(request.context)
    if context:
        parts.append("Earlier messages (context only; extract nothing from these):\n\n"
                     + "\n\n".join(map(_message_block, context)))
    new = shown_messages(request.messages)
    parts.append("New messages (extract from these):\n\n"
                 + ("\n\n".join(map(_message_block, new)) if new else "(none)"))
    parts.append('Answer with the JSON object {"facts": [...]} only.')
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]
