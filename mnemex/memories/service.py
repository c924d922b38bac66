"""The classic two-call memory service (``add_session`` / ``search``), the shape of
Google ADK's ``BaseMemoryService``, on top of scope refs. Not part of mnemex's top
level: the ADK integration builds on it."""

from __future__ import annotations

from mnemex._time import iso
from mnemex.errors import InvalidInput
from mnemex.memories.protocol import MemoryEntry, SearchRequest, SearchResponse, Session, SessionAdded
from mnemex.memories.ref import ScopeRef, ScopeServices

__all__ = ["MemoryService"]


# -- the classic two-call interface ------------------------------------------------------------
class MemoryService:
    """The classic memory service: ``add_session(session)`` and
    ``search(SearchRequest(query=..., user_id=..., app_name=...))`` with the classic
    matching (memories sharing a word with the query, most words matched first,
    then the most recent). Users and apps are isolated completely: each
    (app_name, user_id) is its own scope actor."""

    def __init__(self, scopes: ScopeServices) -> None:
        self._scopes = scopes

    def _scope(self, app_name: str, user_id: str) -> ScopeRef:
        return ScopeRef(self._scopes, user_id=user_id, app_name=app_name)

    async def add_session(self, session: Session) -> SessionAdded:
        if not isinstance(session, Session):
            raise InvalidInput(f"add_session takes a mnemex.Session, got {type(session).__name__}",
                               field="session")
        return await self._scope(session.app_name, session.user_id).add_session(session)

    async def add_session_to_memory(self, session: Session) -> SessionAdded:
        """The same as add_session (the name some hosts call)."""
        return await self.add_session(session)

    async def search(self, request: SearchRequest) -> SearchResponse:
        if not isinstance(request, SearchRequest):
            raise InvalidInput(f"search takes a mnemex.SearchRequest, got {type(request).__name__}",
                               field="request")
        top_k = min(request.top_k, self._scopes.config.memories.max_top_k)
        result = await self._scope(request.app_name, request.user_id).search(request.query, top_k,
                                                                             mode="keyword", min_score=0.0)
        return SearchResponse(memories=[
            MemoryEntry(content=hit.memory.content, author=hit.memory.author,
                        timestamp=iso(hit.memory.timestamp), id=hit.memory.id)
            for hit in result.hits])

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchResponse:
        """The same as search (the keyword form some hosts call)."""
        return await self.search(SearchRequest(query=query, user_id=user_id, app_name=app_name))


