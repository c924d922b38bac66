"""LLMExtractor: facts from one call to an OpenAI-compatible chat completions
endpoint per extraction job.

The call shows the prompt of ``knowledge.prompt`` and asks for structured output
(``LLMClient`` falls back from a JSON Schema to JSON mode to none, as the server
allows). The answer goes through the tolerant parser; when even that finds nothing
usable, the model is asked once more, told what was wrong, and a second unusable
answer raises ``ExtractionError(reason="malformed")``. A call that fails (timeout,
unreachable, an error status) raises ``ExtractionError`` with the client's reason;
an answer with no facts is an empty result, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from mnemex._llm import Completion, LLMCallError, LLMClient, client_from_config
from mnemex.errors import ExtractionError
from mnemex.knowledge.facts import ExtractedFact, ExtractionRequest, ExtractionResult, Usage
from mnemex.knowledge.parse import parse_facts
from mnemex.knowledge.prompt import EXTRACTION_SCHEMA, PROMPT_VERSION, extraction_messages, shown_messages

if TYPE_CHECKING:
    import httpx

    from mnemex.config import LLMConfig

__all__ = ["LLMExtractor", "extractor_from_config"]

_SCHEMA_NAME: Final = "extracted_facts"
_ECHO_LIMIT: Final = 4000
"""Longest unusable answer shown back to the model in the retry (longer: only the error)."""


class LLMExtractor:
    """An Extractor over an ``LLMClient``: one call per ``extract`` when the answer
    parses, two when the first does not. ``max_output_tokens`` caps each answer.
    Its ``name`` is ``llm:<model>:<prompt version>``. Categories outside a request's
    catalog are dropped (when the request has one). Thread-safe."""

    __slots__ = ("client", "max_output_tokens")

    def __init__(self, client: LLMClient, *, max_output_tokens: int = 2048) -> None:
        if max_output_tokens < 1:
            raise ValueError(f"LLMExtractor max_output_tokens must be >= 1, got {max_output_tokens!r}")
        self.client = client
        self.max_output_tokens = max_output_tokens

    def __repr__(self) -> str:
        return f"LLMExtractor({self.client!r})"

    @property
    def name(self) -> str:
        """``llm:<model>:<prompt version>``: what each memory records as its extractor."""
        return f"llm:{self.client.model}:{PROMPT_VERSION}"

    def extract(self, request: ExtractionRequest) -> ExtractionResult:
        """The facts in ``request.messages`` (see the module doc). No message left to
        show (none, or only system messages and injected memories): an empty result,
        without a call. Raises ExtractionError."""
        new = shown_messages(request.messages)
        if not new:
            return ExtractionResult(facts=[], extractor=self.name)
        messages = extraction_messages(request)
        offered = frozenset(memory.number for memory in request.offered)
        positions = frozenset(message.position for message in new)
        completions = [self._complete(messages)]
        try:
            facts = parse_facts(completions[0].text, offered_numbers=offered, positions=positions,
                                finish_reason=completions[0].finish_reason)
        except ExtractionError as first:
            try:
                completions.append(self._complete([*messages, *_correction(completions[0], first)]))
            except ExtractionError as failed:
                raise ExtractionError(str(failed), reason=failed.reason,
                                      usage=_summed(completions)) from failed
            try:
                facts = parse_facts(completions[1].text, offered_numbers=offered, positions=positions,
                                    finish_reason=completions[1].finish_reason)
            except ExtractionError as second:
                raise ExtractionError(f"LLM endpoint {self.client.url} gave no usable facts in two answers; "
                                      f"the second: {second}; the first: {first}",
                                      reason="malformed", usage=_summed(completions)) from second
        return ExtractionResult(facts=_in_catalog(facts, request.categories), extractor=self.name,
                                usage=_summed(completions))

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    def _complete(self, messages: Sequence[Mapping[str, str]]) -> Completion:
        try:
            return self.client.complete(messages, json_schema=EXTRACTION_SCHEMA, schema_name=_SCHEMA_NAME,
                                        max_tokens=self.max_output_tokens)
        except LLMCallError as exc:
            raise ExtractionError(str(exc), reason=exc.reason) from exc


def _correction(answer: Completion, error: ExtractionError) -> list[dict[str, str]]:
    """What the retry adds to the conversation: the unusable answer (when it is short
    and whole) and what was wrong with it."""
    added: list[dict[str, str]] = []
    if answer.finish_reason == "length":
        advice = "It was cut off at the token limit: give fewer facts, each one short sentence."
    else:
        advice = "Give nothing before or after the JSON."
        if answer.text.strip() and len(answer.text) <= _ECHO_LIMIT:
            added.append({"role": "assistant", "content": answer.text})
    added.append({"role": "user", "content": f"Your answer could not be used: {error} {advice} "
                                             "Answer again with only the JSON object "
                                             '{"facts": [...]} described above.'})
    return added


def _in_catalog(facts: list[ExtractedFact], catalog: Mapping[str, str]) -> list[ExtractedFact]:
    """``facts`` with only the categories of ``catalog`` (matched case-insensitively,
    spelled as the catalog does); every category when the catalog is empty."""
    if not catalog:
        return facts
    names = {name.casefold(): name for name in catalog}
    kept: list[ExtractedFact] = []
    for fact in facts:
        pairs = [(names[category.casefold()], confidence)
                 for category, confidence in zip(fact.categories, fact.confidences, strict=False)
                 if category.casefold() in names]
        categories = tuple(name for name, _ in pairs)
        kept.append(fact if categories == fact.categories else msgspec.structs.replace(
            fact, categories=categories, confidences=tuple(confidence for _, confidence in pairs)))
    return kept


def _summed(completions: Sequence[Completion]) -> Usage:
    return Usage(prompt_tokens=sum(c.usage.prompt_tokens for c in completions),
                 completion_tokens=sum(c.usage.completion_tokens for c in completions),
                 total_tokens=sum(c.usage.total_tokens for c in completions),
                 calls=len(completions))


def extractor_from_config(config: LLMConfig, *, transport: httpx.BaseTransport | None = None
                          ) -> LLMExtractor | None:
    """The LLM extractor the ``llm`` config section (with the environment's
    ``MNEMEX_LLM_*`` over it, see ``mnemex._llm.client_from_config``) describes;
    None when it names no endpoint (facts are then extracted by rules)."""
    client = client_from_config(config, transport=transport)
    return None if client is None else LLMExtractor(client, max_output_tokens=config.max_output_tokens)
