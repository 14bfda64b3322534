"""The OpenAPI 3.1 document, built from the route table.

Request bodies are the pydantic input models' JSON schemas; results are the
library's records (stdlib dataclasses) read by pydantic's ``TypeAdapter``, so
the document and the code cannot disagree. Built once, on first request.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from broker import __version__
from broker.frontends.http.api import KINDS, Endpoint
from broker.frontends.http.errors import DESCRIPTIONS
from broker.frontends.http.results import ErrorBody

REF = "#/components/schemas/{model}"
ERRORS = {
    "operator": (401, 403, 404, 409, 413, 422, 503),
    "agent": (401, 403, 404, 409, 413, 422, 429, 503),
    "joiner": (401, 403, 404, 409, 413, 422, 503),
    "none": (),
}


def _schema(tp: Any, defs: dict[str, Any], mode: str = "serialization") -> dict[str, Any]:
    schema = TypeAdapter(tp).json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
    defs.update(schema.pop("$defs", {}))
    return schema


def build(endpoints: list[Endpoint]) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    error_ref = {"$ref": REF.format(model="ErrorBody")}
    _schema(ErrorBody, defs)
    defs["ErrorBody"] = {**_schema(ErrorBody, defs), "additionalProperties": True}
    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        op: dict[str, Any] = {
            "summary": ep.summary,
            "operationId": ep.handler.__module__.rsplit("_", 1)[-1] + "_" + ep.handler.__name__,
            "tags": [ep.tag],
        }
        if ep.auth in ("operator", "agent"):
            op["security"] = (
                [{"operatorKey": []}] if ep.auth == "operator" else [{"agentToken": []}]
            )
        params: list[dict[str, Any]] = []
        if "{kind}" in ep.path:
            params.append(
                {
                    "name": "kind",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "enum": list(KINDS)},
                    "description": "runs (workflow and run), sessions, agentiflows, or spaces (any kind)",
                }
            )
        if "{id}" in ep.path:
            params.append(
                {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_]{1,40}$"},
                    "description": "the run id: full, compact (no kind prefix) or a unique prefix",
                }
            )
        for name, doc in ep.path_params.items():
            params.append(
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1, "maxLength": 400},
                    "description": doc,
                }
            )
        for q in ep.query:
            schema: dict[str, Any]
            if q.type == "int":
                schema = {"type": "integer"}
                if q.minimum is not None:
                    schema["minimum"] = q.minimum
                if q.maximum is not None:
                    schema["maximum"] = q.maximum
            elif q.type == "bool":
                schema = {"type": "boolean"}
            elif q.type == "number":
                schema = {"type": "number"}
            elif q.type == "time":
                schema = {"type": "string", "maxLength": 40, "description": "ISO-8601, UTC"}
            elif q.type == "list":
                item: dict[str, Any] = {"type": "string"}
                if q.choices:
                    item["enum"] = list(q.choices)
                schema = {"type": "array", "items": item}
            else:
                schema = {"type": "string", "minLength": 1, "maxLength": 400}
                if q.choices:
                    schema = {"type": "string", "enum": list(q.choices)}
            entry = {"name": q.name, "in": "query", "required": False, "schema": schema}
            entry["description"] = q.description
            if q.type == "list":
                entry.update(style="form", explode=True)
            params.append(entry)
        if ep.stream:
            params.append(
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
                    "description": "the log's stream: the last seq received, it resumes "
                    "after it (a view's stream sends its whole reading and ignores it)",
                }
            )
        if params:
            op["parameters"] = params
        if ep.op is not None and ep.method != "GET":
            from_path = frozenset(ep.path_params) | (
                frozenset({"space"})
                if "{id}" in ep.path and ep.auth in ("operator", "joiner")
                else frozenset()
            )
            body_schema = ep.op.input.schema(from_path)
            if body_schema["properties"]:  # none: the path says it all (an empty body or {})
                op["requestBody"] = {
                    "required": "required" in body_schema,
                    "content": {"application/json": {"schema": body_schema}},
                }
        elif ep.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _schema(ep.body, defs, "validation")}},
            }
        responses: dict[str, Any] = {}
        if ep.stream:
            responses[str(ep.status)] = {
                "description": "the log: message events (id = seq); a view: state or spaces "
                "events, each the whole reading; keep-alive comments, and a last shutdown / "
                "cutoff / end event (the log's with resume_after)",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        else:
            responses[str(ep.status)] = {
                "description": "OK",
                "content": {"application/json": {"schema": _schema(ep.returns, defs)}},
            }
        for status in ERRORS[ep.auth]:
            responses[str(status)] = {
                "description": DESCRIPTIONS[status],
                "content": {"application/json": {"schema": error_ref}},
            }
        op["responses"] = responses
        paths.setdefault(ep.path, {})[ep.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "broker",
            "version": __version__,
            "description": "The broker's control plane: the library over HTTP (docs/served.md).",
        },
        "paths": paths,
        "components": {
            "schemas": defs,
            "securitySchemes": {
                "operatorKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the store's operator key (S29)",
                },
                "agentToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a participant's token from join (S2)",
                },
            },
        },
    }
