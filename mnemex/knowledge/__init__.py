"""The knowledge layer: facts extracted from conversations, the cursor that
tracks what was extracted, consolidation against what is already known.

Pure code: no trio, no kernel, no models (the scope's ``kind``/``ref`` wire it to
the runtime)."""

from mnemex.knowledge.facts import (
    INJECTED_CLOSE,
    INJECTED_OPEN,
    KINDS,
    ExtractedFact,
    ExtractionRequest,
    ExtractionResult,
    Extractor,
    OfferedMemory,
    Relation,
    SourceMessage,
    Usage,
    strip_injected,
)

__all__ = [
    "INJECTED_CLOSE",
    "INJECTED_OPEN",
    "KINDS",
    "ExtractedFact",
    "ExtractionRequest",
    "ExtractionResult",
    "Extractor",
    "OfferedMemory",
    "Relation",
    "SourceMessage",
    "Usage",
    "strip_injected",
]
