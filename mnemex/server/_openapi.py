"""The OpenAPI document, with its schemas generated from the msgspec types the
handlers decode and encode (so the document cannot drift from the code)."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from mnemex.server._schemas import PostArchive, PostMemory, PostMemoryBatch, PostMessages, PostSearch

__all__ = ["openapi_document"]


class MessageRecord(msgspec.Struct):
    sequence: int
    timestamp: str
    session_id: str
    query_id: str
    message: dict[str, Any]


class MessagesPage(msgspec.Struct):
    messages: list[MessageRecord]
    total: int
    limit: int
    offset: int


class Sessions(msgspec.Struct):
    sessions: list[str]


class Completed(msgspec.Struct):
    status: str
    session: str


class Error(msgspec.Struct):
    error: str


def _json(ref: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(code): {"description": "error", **_json("Error")} for code in codes}


def _query(name: str, kind: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": {"type": kind}}


@functools.cache
def openapi_document() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(
        [PostMessages, MessagesPage, Sessions, Completed, Error, PostMemory, PostMemoryBatch, PostSearch,
         PostArchive],
        ref_template="#/components/schemas/{name}")
    session = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}
    memory = {"name": "memory_id", "in": "path", "required": True, "schema": {"type": "string"}}
    scope_user = {"name": "user_id", "in": "query", "required": True, "schema": {"type": "string"}}
    scope_app = {"name": "app_name", "in": "query", "required": True, "schema": {"type": "string"}}
    paths: dict[str, Any] = {
        "/messages": {
            "post": {"summary": "Store messages in a session, in order",
                     "requestBody": {"required": True, **_json("PostMessages")},
                     "responses": {"201": {"description": "stored"}, **_errors(400, 413, 422, 503)}},
            "get": {"summary": "Stored messages, oldest first; without limit, all of them",
                    "parameters": [_query("session_id", "string", "one session"),
                                   _query("query_id", "string", "one query"),
                                   {**_query("limit", "integer", "page size"),
                                    "schema": {"type": "integer", "minimum": 1}},
                                   {**_query("offset", "integer", "from the oldest"),
                                    "schema": {"type": "integer", "minimum": 0}}],
                    "responses": {"200": {"description": "a page", **_json("MessagesPage")},
                                  **_errors(400)}},
            "delete": {"summary": "Delete one session (session_id) or every session",
                       "parameters": [_query("session_id", "string", "only this session")],
                       "responses": {"200": {"description": "deleted"}}},
        },
        "/sessions": {"get": {"summary": "Session ids",
                              "responses": {"200": {"description": "ids", **_json("Sessions")}}}},
        "/memory-status": {"get": {"summary": "Counts per session",
                                   "responses": {"200": {"description": "counts"}}}},
        "/session/{session_id}/complete": {"post": {
            "summary": "Mark a session completed (ends live streams)", "parameters": [session],
            "responses": {"200": {"description": "completed", **_json("Completed")}}}},
        "/stream/{session_id}": {"get": {
            "summary": "Server-sent events: history (from-beginning), [LIVE_MODE], live messages, "
                       "[STREAM_END], [DONE]",
            "parameters": [session, _query("from-beginning", "boolean", "replay the history first"),
                           _query("wait-for-session", "boolean", "wait for an unknown session"),
                           _query("timeout", "string", "Go-style duration to wait, e.g. 30s")],
            "responses": {"200": {"description": "an event stream",
                                  "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                          **_errors(400, 404)}}},
        "/memory": {"post": {"summary": "Store one memory in the (app_name, user_id) scope",
                             "requestBody": {"required": True, **_json("PostMemory")},
                             "responses": {"201": {"description": "its id"}, **_errors(400, 413, 422)}}},
        "/memory/batch": {"post": {"summary": "Store many memories",
                                   "requestBody": {"required": True, **_json("PostMemoryBatch")},
                                   "responses": {"201": {"description": "their ids"},
                                                 **_errors(400, 413, 422)}}},
        "/memory/search": {"post": {"summary": "Search one scope or several (any mode)",
                                    "requestBody": {"required": True, **_json("PostSearch")},
                                    "responses": {"200": {"description": "ranked results"},
                                                  **_errors(400, 413, 422)}}},
        "/memory/{memory_id}": {
            "get": {"summary": "One memory, within its own scope",
                    "parameters": [memory, scope_user, scope_app],
                    "responses": {"200": {"description": "the memory"}, **_errors(400, 404)}},
            "delete": {"summary": "Forget one memory, within its own scope",
                       "parameters": [memory, scope_user, scope_app],
                       "responses": {"200": {"description": "deleted"}, **_errors(400, 404)}}},
        "/sessions/{session_id}/archive": {"post": {
            "summary": "Move a conversation into long-term memory", "parameters": [session],
            "requestBody": {"required": True, **_json("PostArchive")},
            "responses": {"200": {"description": "archived"}, **_errors(400, 422)}}},
        "/health": {"get": {"summary": "Liveness and runtime counts",
                            "responses": {"200": {"description": "ok"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {
            "description": "text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    }
    return {"openapi": "3.0.3",
            "info": {"title": "mnemex", "version": "0.1.0",
                     "description": "Memory for AI agents: conversations and long-term memory."},
            "paths": paths, "components": {"schemas": components}}
