"""``broker serve``'s doors for a newcomer: the API reference at ``/docs`` (made
from ``/openapi.json``, nothing from the network, the console's strict CSP) and
MCP at ``/mcp`` itself, without a redirect. A real server, a real browser
(headless Chromium) and the MCP SDK's client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import trusted

from broker import Operator, Store
from tests.frontends.http.test_console import CHROMIUM, FLAGS, require_browser
from tests.served import Server, serving, store_of

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(tmp_path_factory, "docs")


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    yield from store_of(srv)


def _operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    methods = ("get", "post", "put", "patch", "delete")
    return [(m, p) for p, item in document["paths"].items() for m in methods if m in item]


def test_docs_is_the_openapi_document_as_a_page_under_the_consoles_csp(srv: Server) -> None:
    with srv.client() as c:  # no credential: like the document, the page is public
        document = c.get("/openapi.json").json()
        page = c.get("/docs")
        console = c.get("/")
        css = c.get("/static/docs.css")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == console.headers["content-security-policy"]
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    html = page.text
    assert "<script" not in html and " style=" not in html  # nothing the CSP would refuse
    for method, path in _operations(document):
        heading = f'<span class="method">{method.upper()}</span> <code>{path}</code></h3>'
        assert heading in html, (method, path)
        summary = document["paths"][path][method].get("summary")
        if summary:
            assert summary.replace("'", "&#x27;") in html, (method, path)
    for name in document["components"]["schemas"]:
        assert f'id="schema-{name}"' in html, name
    assert 'href="/openapi.json"' in html


def test_docs_renders_in_a_browser_with_nothing_from_the_network(srv: Server) -> None:
    require_browser()
    from playwright.sync_api import sync_playwright

    with srv.client() as c:
        document = c.get("/openapi.json").json()
    requested: list[str] = []
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requested.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(srv.base + "/docs")
            sections = page.locator("section.op").count()
            width = page.evaluate("getComputedStyle(document.body).maxWidth")
            first = page.locator("nav a").first
            target = first.get_attribute("href")
            first.click()
            assert page.evaluate("location.hash") == target
        finally:
            browser.close()
    assert sections == len(_operations(document))
    assert width != "none"  # its stylesheet loaded under the CSP
    assert problems == []
    assert {urlsplit(u).netloc for u in requested} == {urlsplit(srv.base).netloc}
    assert {urlsplit(u).path for u in requested} == {"/docs", "/static/docs.css"}


def test_mcp_answers_at_slash_mcp_itself_without_a_redirect(srv: Server, store: Store) -> None:
    """spec §Served mode: MCP at /mcp; /mcp/ answers too."""
    mcp = pytest.importorskip("mcp")
    streamable = pytest.importorskip("mcp.client.streamable_http")
    httpx2 = pytest.importorskip("httpx2")
    sid = Operator(store).create_space("session").id
    _, joined = trusted.join(store, sid, "lynx")
    trusted.join(store, sid, "otter")

    with srv.client(joined.token) as c:
        for path in ("/mcp", "/mcp/"):
            r = c.post(path, json={}, headers={"accept": "application/json, text/event-stream"})
            assert r.status_code != 307 and "location" not in r.headers, (path, r.status_code)

    async def session_at(path: str) -> tuple[set[str], bool]:
        client = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {joined.token}"},
            timeout=30,
            follow_redirects=False,  # a redirect would fail the session, not be followed
        )
        async with (
            client,
            streamable.streamable_http_client(srv.base + path, http_client=client) as (r, w, *_),
            mcp.ClientSession(r, w) as session,
        ):
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            sent = await session.call_tool("msg_send", {"to": ["otter"], "text": f"over {path}"})
            return tools, sent.is_error

    for path in ("/mcp", "/mcp/"):
        tools, failed = asyncio.run(session_at(path))
        assert "msg_send" in tools and not failed, path
    bodies = [e.body for e in Operator(store).log(sid)]
    assert bodies == ["over /mcp", "over /mcp/"]


def test_S22_client_mode_board_claim_wait_is_parked_by_the_server(
    srv: Server, store: Store
) -> None:
    """In client mode `board claim --wait` is served: the server parks the
    claim on the key's doorbell (a long-poll, like the inbox's), and answers
    when the key is free, or claim_held once the wait is over."""
    import os
    import subprocess
    import sys
    import time

    sid = Operator(store).create_space("workflow").id
    _, joined = trusted.join(store, sid, "lynx")
    otter, _ = trusted.join(store, sid, "otter")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env.update(BROKER_URL=srv.base, BROKER_SPACE=sid, BROKER_AS="lynx")
    env["BROKER_TOKEN"] = joined.token

    def claim(key: str, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "broker", "board", "claim", key, "--json", *extra]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

    otter.claim_key("long", 3600)
    started = time.monotonic()
    in_vain = claim("long", "--wait", "0.5")
    assert in_vain.returncode == 5 and "claim_held" in in_vain.stderr, in_vain.stderr
    assert time.monotonic() - started >= 0.5  # it waited on the server, then said so
    otter.claim_key("short", 1.5)
    got = claim("short", "--wait", "30")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["holder"] == "lynx"  # woken at otter's expiry, then claimed
