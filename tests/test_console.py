"""The web console (spec §Served mode) in headless Chromium, against a real
``broker serve``: a space's log following live, an operator send, hostile
bodies shown as text (S31's rule for the browser: agent text is never HTML).

Needs Debian's ``chromium`` and Playwright's Python API (driving the system
browser: no browser download); skipped where either is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trusted

from broker import Store
from tests.served import Server, clean_env

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
playwright = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed"),
    pytest.mark.timeout(300),
]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE = [
    '<img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=2</script>",
    '"><svg onload="window.__pwned=3">',
    "\x1b[31mred\x1b[0m & <b>bold</b>",
]
SHOT = Path(__file__).resolve().parent.parent / "docs" / "console.png"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "home", "--quiet")
    try:
        yield srv
    finally:
        srv.stop()


def test_S31_console_follows_live_sends_from_the_box_and_shows_hostile_bodies_as_text(
    served: Server,
) -> None:
    store = Store(served.url)
    try:
        op = __import__("broker").Operator(store)
        sid = op.create_space("workflow").id
        lead, _ = trusted.join(store, sid, "heron", lead=True, agent="planner", role="lead")
        lynx, _ = trusted.join(store, sid, "lynx", agent="coder", role="coder")
        _, otter = trusted.join(store, sid, "otter", agent="tester", role="tester")
        lead.send("lynx", "Please refactor src/app.py; tests first.")
        lynx.send("lead", "On it. Claiming src/app.py.")
        lynx.claim_key("src/app.py", 600)
        lead.post("Stand-up: lynx on app.py, otter on the test suite.")
        lead.send(["lynx", "ghost"], "Who else is here?")
        for body in HOSTILE:
            lynx.send("lead", body)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{served.base}/#space={sid}")
                page.fill("#key", served.key)
                page.click("#login-form button")
                log = page.locator("#log li")
                log.nth(len(HOSTILE) + 2).wait_for()
                # hostile bodies: shown as the exact text, never run as HTML
                bodies = page.locator("#log .body").all_text_contents()
                for body in HOSTILE:
                    assert body in bodies
                assert page.evaluate("window.__pwned === undefined")
                assert page.locator("#log img, #log script, #log svg, #log b").count() == 0
                # the key is in no URL
                assert served.key not in page.url
                # a message sent by another process appears live
                count = log.count()
                subprocess.run(
                    [sys.executable, "-c",
                     "from broker import Agent, Store\n"
                     f"s = Store({served.url!r})\n"
                     f"Agent.connect(s, {sid!r}, 'otter', {otter.token!r})"
                     ".send('lead', 'tests are green (from another process)')"],
                    check=True, env=clean_env(served.home), timeout=60,
                )  # fmt: skip
                log.nth(count).wait_for()
                assert "tests are green (from another process)" in log.nth(count).inner_text()
                # the operator's send box: the message lands in the log, via cp, with its outcome
                page.fill("#send-to", "lynx, otter")
                page.check("#send-urgent")
                page.fill("#send-text", "Ship it after review.")
                page.click("#send-form button")
                log.nth(count + 1).wait_for()
                mine = log.nth(count + 1).inner_text()
                assert "Ship it after review." in mine and "via cp" in mine and "URGENT" in mine
                assert "reached: lynx, otter" in mine
                assert op.log(sid)[-1].via == "cp"
                # the other tabs
                page.click("button[data-tab=participants]")
                page.locator("#participants td", has_text="otter").first.wait_for()
                page.click("button[data-tab=board]")
                page.locator("#claims td", has_text="src/app.py").first.wait_for()
                page.click("button[data-tab=messages]")
                page.wait_for_timeout(200)
                page.screenshot(path=str(SHOT) if os.environ.get("BROKER_SCREENSHOT") else None)
                assert not errors, errors
            finally:
                browser.close()
    finally:
        store.close()
