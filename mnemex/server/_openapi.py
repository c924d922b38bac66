"""The OpenAPI document, made from the route table the app is built from and the
msgspec Structs its handlers decode and encode, so it cannot drift from the code:
a route the app serves is a route the document lists, with its query parameters,
its request body and its answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from mnemex.server._schemas import Error

__all__ = ["Param", "RouteSpec", "openapi_document"]


@dataclass(frozen=True, slots=True)
class Param:
    """A query parameter: its name, JSON type and meaning."""

    name: str
    kind: str
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One route: what the app serves and what the document says about it."""

    path: str
    method: str
    handler: str
    """The name of the _Api method answering it."""
    summary: str
    params: tuple[Param, ...] = ()
    body: type[msgspec.Struct] | None = None
    reply: type[msgspec.Struct] | None = None
    status: int = 200
    media: str = "application/json"
    """What the answer is: JSON (``reply``), or text/event-stream, text/plain."""
    errors: tuple[int, ...] = (400,)
    per_agent: bool = False
    """Also served as ``/agents/{agent}`` + path, for an agent other than the default."""
    form: bool = False
    """The body may also be multipart/form-data: ``body``'s fields as form fields,
    ``content`` a file (the handler checks the content type itself)."""

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params)


_SECURITY_ERRORS: Final = (401, 403, 415, 503)


def _schema_ref(cls: type[msgspec.Struct]) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{cls.__name__}"}


def _operation(spec: RouteSpec, agent: bool) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = []
    if agent:
        parameters.append({"name": "agent", "in": "path", "required": True, "schema": {"type": "string"},
                           "description": "the agent whose conversations these are"})
    for part in spec.path.split("/"):
        if part.startswith("{"):
            parameters.append({"name": part.strip("{}"), "in": "path", "required": True,
                               "schema": {"type": "string"}})
    parameters += [{"name": p.name, "in": "query", "required": p.required, "description": p.description,
                    "schema": {"type": p.kind}} for p in spec.params]
    if spec.reply is not None:
        content = {spec.media: {"schema": _schema_ref(spec.reply)}}
    else:
        content = {spec.media: {"schema": {"type": "string"}}}
    error = {"description": "error", "content": {"application/json": {"schema": _schema_ref(Error)}}}
    errors = {str(code): error for code in sorted({*spec.errors, *_SECURITY_ERRORS})}
    operation: dict[str, Any] = {
        "summary": spec.summary, "operationId": f"{spec.handler}{'_agent' if agent else ''}",
        "parameters": parameters,
        "responses": {str(spec.status): {"description": spec.summary, "content": content}, **errors}}
    if spec.body is not None:
        content = {"application/json": {"schema": _schema_ref(spec.body)}}
        if spec.form:
            content["multipart/form-data"] = {"schema": _form_schema(spec.body)}
        operation["requestBody"] = {"required": True, "content": content}
    return operation


def _form_schema(body: type[msgspec.Struct]) -> dict[str, Any]:
    """The multipart form of ``body``: each field a text field, ``content`` a file,
    booleans as true or false."""
    properties: dict[str, Any] = {}
    required = []
    for field in msgspec.structs.fields(body):
        if field.name == "content":
            properties[field.name] = {"type": "string", "format": "binary"}
        elif field.type is bool:
            properties[field.name] = {"type": "boolean"}
        else:
            properties[field.name] = {"type": "string"}
        if field.required:
            required.append(field.name)
    return {"type": "object", "properties": properties, "required": required}


def openapi_document(routes: Sequence[RouteSpec]) -> dict[str, Any]:
    """The OpenAPI 3.0 document of ``routes``."""
    structs = {s for spec in routes for s in (spec.body, spec.reply) if s is not None} | {Error}
    _, components = msgspec.json.schema_components(sorted(structs, key=lambda s: s.__name__),
                                                   ref_template="#/components/schemas/{name}")
    paths: dict[str, dict[str, Any]] = {}
    for spec in routes:
        paths.setdefault(spec.path, {})[spec.method.lower()] = _operation(spec, agent=False)
        if spec.per_agent:
            prefixed = paths.setdefault("/agents/{agent}" + spec.path, {})
            prefixed[spec.method.lower()] = _operation(spec, agent=True)
    return {"openapi": "3.0.3",
            "info": {"title": "mnemex", "version": "0.1.0",
                     "description": "Memory for AI agents: conversations, pushed streams and long-term "
                                    "memory. Errors are JSON {\"error\": ..., \"field\": ...}."},
            "paths": paths, "components": {"schemas": components}}
