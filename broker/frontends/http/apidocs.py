"""``/docs``: the API reference, one plain HTML page made from the OpenAPI document.

The page is the document (``/openapi.json``) read for people: every operation
with its parameters, request body and responses, then every schema with its
properties. It is generated on the server, so it needs no script and nothing
from the network: it links only its own stylesheet, under the console's strict
content security policy. Every text of the document is escaped.
"""

from __future__ import annotations

from html import escape
from typing import Any

_REF = "#/components/schemas/"
_BOUNDS = (
    ("minimum", "≥ {}"),
    ("maximum", "≤ {}"),
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("minItems", "at least {} items"),
    ("maxItems", "at most {} items"),
    ("pattern", "matching {}"),
)
_METHODS = ("get", "post", "put", "patch", "delete")


def _anchor(kind: str, name: str) -> str:
    safe = "".join(c if c.isalnum() else "-" for c in name)
    return f"{kind}-{safe}"


def type_of(schema: dict[str, Any]) -> str:
    """A schema in words (HTML): ``list of <a>LogEntry</a>``, ``string or null``."""
    if "$ref" in schema:
        name = str(schema["$ref"]).removeprefix(_REF)
        return f'<a href="#{_anchor("schema", name)}">{escape(name)}</a>'
    if "anyOf" in schema or "oneOf" in schema:
        parts = [type_of(s) for s in schema.get("anyOf", schema.get("oneOf", []))]
        text = " or ".join(dict.fromkeys(parts))
    elif "enum" in schema:
        text = "one of " + " | ".join(f"<code>{escape(str(v))}</code>" for v in schema["enum"])
    elif schema.get("type") == "array":
        text = "list of " + type_of(schema.get("items", {}))
    elif schema.get("type") == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        text = "object" + (f" of {type_of(extra)}" if isinstance(extra, dict) else "")
    else:
        kind = schema.get("type", "any")
        text = escape(" or ".join(kind) if isinstance(kind, list) else str(kind))
    bounds = [fmt.format(escape(str(schema[key]))) for key, fmt in _BOUNDS if key in schema]
    if bounds:
        text += f" ({', '.join(bounds)})"
    return text


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["<table>", "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows]
    return [*out, "</table>"]


def _content(body: dict[str, Any]) -> str:
    """A request body's or a response's schema, by media type; an inline object
    by its fields' names."""
    shown = []
    for media, spec in body.get("content", {}).items():
        schema = spec.get("schema")
        what = type_of(schema) if isinstance(schema, dict) else "any"
        if isinstance(schema, dict) and schema.get("properties"):
            names = ", ".join(f"<code>{escape(n)}</code>" for n in schema["properties"])
            what = f"object with {names}"
        shown.append(f"<code>{escape(media)}</code>: {what}")
    return "; ".join(shown)


def _fields(schema: dict[str, Any]) -> list[str]:
    """An object schema's properties as a table."""
    required = set(schema.get("required", []))
    return _table(
        ("field", "type", "required", "description"),
        [
            (
                f"<code>{escape(field)}</code>",
                type_of(spec),
                "yes" if field in required else "no",
                escape(spec.get("description", "")),
            )
            for field, spec in schema.get("properties", {}).items()
        ],
    )


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    title = f"{method.upper()} {path}"
    out = [
        f'<section class="op" id="{_anchor("op", op.get("operationId", title))}">',
        f'<h3><span class="method">{method.upper()}</span> <code>{escape(path)}</code></h3>',
    ]
    if op.get("summary"):
        out.append(f"<p><strong>{escape(op['summary'])}</strong></p>")
    if op.get("description"):
        out.append(f"<p>{escape(op['description'])}</p>")
    security = [name for req in op.get("security", []) for name in req]
    auth = ", ".join(f'<a href="#{_anchor("auth", n)}">{escape(n)}</a>' for n in security)
    out.append(f"<p>Authentication: {auth or 'none'}</p>")
    params = op.get("parameters", [])
    if params:
        out.append("<h4>Parameters</h4>")
        out += _table(
            ("name", "in", "type", "required", "description"),
            [
                (
                    f"<code>{escape(p['name'])}</code>",
                    escape(p.get("in", "")),
                    type_of(p.get("schema", {})),
                    "yes" if p.get("required") else "no",
                    escape(p.get("description", "")),
                )
                for p in params
            ],
        )
    if "requestBody" in op:
        body = op["requestBody"]
        needed = "" if body.get("required", False) else " (optional)"
        out.append(f"<h4>Request body{needed}</h4><p>{_content(body)}</p>")
        for spec in body.get("content", {}).values():
            schema = spec.get("schema")
            if isinstance(schema, dict) and schema.get("properties"):
                out += _fields(schema)
    responses = op.get("responses", {})
    if responses:
        out.append("<h4>Responses</h4>")
        out += _table(
            ("status", "description", "body"),
            [
                (f"<code>{escape(str(code))}</code>", escape(r.get("description", "")), _content(r))
                for code, r in responses.items()
            ],
        )
    return [*out, "</section>"]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f'<section class="schema" id="{_anchor("schema", name)}">', f"<h3>{escape(name)}</h3>"]
    if schema.get("description"):
        out.append(f"<p>{escape(schema['description'])}</p>")
    if schema.get("properties"):
        out += _fields(schema)
    else:
        out.append(f"<p>{type_of(schema)}</p>")
    return [*out, "</section>"]


def render(document: dict[str, Any]) -> str:
    """The reference page of an OpenAPI document."""
    info = document.get("info", {})
    title = f"{info.get('title', 'API')} {info.get('version', '')}".strip()
    ops: list[tuple[str, str, str, dict[str, Any]]] = []
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            if method in item:
                op = item[method]
                tag = (op.get("tags") or ["other"])[0]
                ops.append((tag, path, method, op))
    tags = list(dict.fromkeys(tag for tag, *_ in ops))
    out = [
        "<!doctype html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}: API reference</title>",
        '<link rel="stylesheet" href="/static/docs.css">',
        '<link rel="icon" href="data:,">',  # no /favicon.ico request (a 404)
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{escape(title)}: API reference</h1>",
        f"<p>{escape(info.get('description', ''))}</p>",
        '<p>Made from <a href="/openapi.json">/openapi.json</a> (OpenAPI '
        f"{escape(str(document.get('openapi', '')))}); the console is at "
        '<a href="/">/</a>.</p>',
        "</header>",
        "<nav><h2>Operations</h2>",
    ]
    for tag in tags:
        out.append(f"<h3>{escape(tag)}</h3><ul>")
        for t, path, method, op in ops:
            if t == tag:
                anchor = _anchor("op", op.get("operationId", f"{method.upper()} {path}"))
                summary = escape(op.get("summary", ""))
                out.append(
                    f'<li><a href="#{anchor}"><span class="method">{method.upper()}</span> '
                    f"<code>{escape(path)}</code></a> {summary}</li>"
                )
        out.append("</ul>")
    out.append("</nav><main>")
    schemes = document.get("components", {}).get("securitySchemes", {})
    if schemes:
        out.append("<h2>Authentication</h2><dl>")
        for name, scheme in schemes.items():
            how = f"{scheme.get('type', '')} {scheme.get('scheme', '')}".strip()
            out.append(
                f'<dt id="{_anchor("auth", name)}"><code>{escape(name)}</code> '
                f"({escape(how)})</dt><dd>{escape(scheme.get('description', ''))}</dd>"
            )
        out.append("</dl>")
    for tag in tags:
        out.append(f"<h2>{escape(tag)}</h2>")
        for t, path, method, op in ops:
            if t == tag:
                out += _operation(path, method, op)
    out.append("<h2>Schemas</h2>")
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        out += _schema(name, schema)
    out += ["</main>", "</body>", "</html>", ""]
    return "\n".join(out)
