"""The web console (spec §Served mode) in headless Chromium, against a real
``broker serve``: live views (the log, the board, participants and queues,
the list of spaces) over SSE, every operator action with its confirmation,
filters and search, the log's auto-scroll, a 360 px window and a wide one,
the keyboard, and agent text shown as text (S31's rule for the browser).

Drives Debian's ``chromium`` through Playwright's Python API (no browser
download); ``CHROMIUM`` names another binary. Where either is missing the
tests are skipped, except in CI (``CI`` set), where that is a failure.

One server and one browser serve the module; each test makes its own space
and opens its own page. Nothing sleeps blindly: each check waits for what the
operator should see, with a timeout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store
from tests.served import Server, clean_env

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.timeout(300)
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
DOCS = Path(__file__).resolve().parents[3] / "docs"
WAIT_MS = 20_000  # a loaded machine (other suites share its two cores) is slow, never this slow
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 360, "height": 740}


if sync_playwright is not None:
    expect.set_options(timeout=WAIT_MS)


def _missing() -> str | None:
    if sync_playwright is None:
        return "Playwright's Python API is not installed (the dev extra)"
    if not os.path.exists(CHROMIUM):
        return f"no chromium at {CHROMIUM} (Debian's package; CHROMIUM names another)"
    return None


def require_browser() -> None:
    """Skip without a browser; in CI (``CI`` set, as ``.ci/run`` does) fail instead."""
    why = _missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"chromium is required in CI for the console's tests: {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("console") / "home", "--quiet")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def store(srv: Server) -> Iterator[Store]:
    s = Store(srv.url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def op(store: Store) -> Operator:
    return Operator(store)


class Swarm:
    """A fresh workflow space: a lead (heron) and two workers."""

    def __init__(self, store: Store, op: Operator) -> None:
        self.id = op.create_space("workflow").id
        self.lead, _ = trusted.join(store, self.id, "heron", lead=True, agent="planner")
        self.lynx, self.lynx_joined = trusted.join(store, self.id, "lynx", agent="coder")
        self.otter, self.otter_joined = trusted.join(store, self.id, "otter", agent="tester")


@pytest.fixture
def swarm(store: Store, op: Operator) -> Swarm:
    return Swarm(store, op)


Opener = Callable[..., Any]


@pytest.fixture
def console(browser: Any, srv: Server) -> Iterator[Opener]:
    """``console(space, viewport=WIDE)``: a logged-in page on ``space`` (or the
    list of spaces alone). Script errors and CSP violations fail the test."""
    contexts: list[Any] = []
    problems: list[str] = []

    def open_console(space: str | None = None, viewport: dict[str, int] = WIDE) -> Any:
        ctx = browser.new_context(viewport=viewport)
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda e: problems.append(f"script error: {e}"))
        page.on(
            "console",
            lambda m: (
                problems.append(m.text)
                if m.type == "error" and "Content Security Policy" in m.text
                else None
            ),
        )
        page.goto(f"{srv.base}/" + (f"#space={space}" if space else ""))
        page.fill("#key", srv.key)
        page.keyboard.press("Enter")
        expect(page.locator("#spaces .space-link").first).to_be_attached()
        if space:
            expect(page.locator("#space-title")).to_have_text(space)
            expect(page.locator("#summary")).to_contain_text("participants")
        return page

    yield open_console
    for ctx in contexts:
        ctx.close()
    assert not problems, problems


def tab(page: Any, name: str) -> None:
    page.click(f"button[data-tab={name}]")


def confirm(page: Any, reason: str | None = None) -> None:
    dialog = page.locator("#confirm")
    expect(dialog).to_be_visible()
    if reason is not None:
        page.fill("#confirm-reason", reason)
    page.click("#confirm-ok")
    expect(dialog).to_be_hidden()


def in_view(page: Any, selector: str) -> bool:
    """Whether the element is inside the scrolled log's visible part."""
    return bool(
        page.eval_on_selector(
            selector,
            "n => { const b = document.getElementById('log-box').getBoundingClientRect();"
            " const r = n.getBoundingClientRect(); return r.bottom > b.top && r.top < b.bottom; }",
        )
    )


# --- the log ----------------------------------------------------------------------------
def test_S31_console_follows_live_sends_from_the_box_and_shows_hostile_bodies_as_text(
    console: Opener, swarm: Swarm, srv: Server, op: Operator
) -> None:
    lead, lynx = swarm.lead, swarm.lynx
    lead.send("lynx", "Please refactor src/app.py; tests first.")
    lynx.send("lead", "On it. Claiming src/app.py.")
    lead.send(["lynx", "ghost"], "Who else is here?")
    for body in HOSTILE:
        lynx.send("lead", body)
    page = console(swarm.id)
    log = page.locator("#log li:not([hidden])")
    expect(log).to_have_count(len(HOSTILE) + 3)
    bodies = page.locator("#log .body").all_text_contents()
    for body in HOSTILE:
        assert body in bodies
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("#log img, #log script, #log svg, #log b:not(.sender)").count() == 0
    assert srv.key not in page.url
    # who a message did not reach, and why, in words
    expect(page.locator("#log li", has_text="Who else is here?")).to_contain_text(
        "not delivered: ghost (nobody live matches)"
    )
    # a message sent by another process appears live
    subprocess.run(
        [sys.executable, "-c",
         "from broker import Agent, Store\n"
         f"s = Store({srv.url!r})\n"
         f"Agent.connect(s, {swarm.id!r}, 'otter', {swarm.otter_joined.token!r})"
         ".send('lead', 'tests are green (from another process)')"],
        check=True, env=clean_env(srv.home), timeout=60,
    )  # fmt: skip
    expect(log.last).to_contain_text("tests are green (from another process)")
    # the operator's send box: in the log, from the console, with its outcome
    page.fill("#send-to", "lynx, otter")
    page.check("#send-urgent")
    page.fill("#send-text", "Ship it after review.")
    page.click("#send-form button[type=submit]")
    mine = page.locator("#log li", has_text="Ship it after review.")
    expect(mine).to_contain_text("from the console")
    expect(mine).to_contain_text("URGENT")
    expect(mine).to_contain_text("delivered to lynx, otter")
    assert "via cp" not in mine.inner_text()
    expect(page.locator("#send-result")).to_contain_text("Sent to lynx, otter")
    assert op.log(swarm.id)[-1].via == "cp"


def test_console_keeps_the_newest_in_view_until_the_operator_scrolls_up(
    console: Opener, swarm: Swarm
) -> None:
    for i in range(40):
        swarm.lynx.send("lead", f"progress note {i}\nwith a second line")
    page = console(swarm.id)
    expect(page.locator("#log li")).to_have_count(40)
    assert in_view(page, "#log li:last-child")
    assert not in_view(page, "#log li:first-child")
    # a new message while at the bottom: scrolled into view
    swarm.lynx.send("lead", "note 40")
    expect(page.locator("#log li").last).to_contain_text("note 40")
    page.wait_for_function(
        "() => { const b = document.getElementById('log-box');"
        " return b.scrollHeight - b.scrollTop - b.clientHeight < 40; }"
    )
    # the operator scrolls up: new messages wait below, announced
    page.eval_on_selector("#log-box", "b => { b.scrollTop = 0; }")
    page.wait_for_function("() => document.getElementById('log-box').scrollTop === 0")
    swarm.otter.send("lead", "note 41")
    swarm.otter.send("lead", "note 42")
    jump = page.locator("#jump")
    expect(jump).to_have_text("2 new messages below ↓")
    expect(page.locator("#log li").last).to_contain_text("note 42")
    assert not in_view(page, "#log li:last-child")
    assert page.eval_on_selector("#log-box", "b => b.scrollTop") == 0
    jump.click()
    expect(jump).to_be_hidden()
    assert in_view(page, "#log li:last-child")
    # the send box stayed in place all along
    expect(page.locator("#send-text")).to_be_in_viewport()


def test_S18_console_shows_local_times_plain_words_and_folds_read_receipts(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    op.send(swarm.id, "Stand-up in five.", to=["lead"])
    swarm.lynx.send("lead", "done with the parser")
    turn = swarm.lead.next_turn()
    assert turn.id is not None
    swarm.lead.seen(turn.id)
    page = console(swarm.id)
    entry = page.locator("#log li", has_text="done with the parser")
    expect(entry).to_contain_text("seen by lead")
    # the receipt itself is folded out of the default view
    receipt = page.locator("#log li.kind-seen")
    expect(receipt).to_have_count(1)
    expect(receipt).to_be_hidden()
    page.check("#f-receipts")
    expect(receipt).to_be_visible()
    expect(receipt).to_contain_text("read receipt")
    expect(receipt).to_contain_text("read 2 messages")
    # local time shown, UTC on hover; the operator's surface in words
    stamp = entry.locator("time")
    iso = stamp.get_attribute("datetime")
    assert iso is not None and iso.endswith("Z")
    assert stamp.get_attribute("title") == iso.replace("T", " ")[:23] + " UTC"
    shown = stamp.inner_text()
    assert "Z" not in shown and "T" not in shown and ":" in shown
    ops = page.locator("#log li", has_text="Stand-up in five.")
    expect(ops).to_contain_text("from the command line")
    assert "via" not in ops.inner_text()


def test_S36_console_filters_by_sender_kind_and_thread_and_searches_the_space(
    console: Opener, swarm: Swarm
) -> None:
    swarm.lead.send("lynx", "review the tokenizer", thread="parser")
    swarm.lynx.send("lead", "tokenizer reviewed: two bugs", thread="parser")
    swarm.otter.send("lead", "flaky test in the scheduler")
    swarm.lead.post("release train leaves at noon")
    page = console(swarm.id)
    visible = page.locator("#log li:not([hidden])")
    expect(visible).to_have_count(4)
    page.select_option("#f-sender", "otter")
    expect(visible).to_have_count(1)
    expect(visible.first).to_contain_text("flaky test")
    expect(page.locator("#filter-state")).to_contain_text("1 of the 4 loaded messages match")
    page.select_option("#f-sender", "")
    page.select_option("#f-kind", "post")
    expect(visible).to_have_count(1)
    expect(visible.first).to_contain_text("release train")
    page.select_option("#f-kind", "")
    page.select_option("#f-thread", "parser")
    expect(visible).to_have_count(2)
    page.click("#f-clear")
    expect(visible).to_have_count(4)
    # search: the space's full-text index, best first, the words marked
    page.fill("#f-text", "tokenizer")
    hits = page.locator("#hits li")
    expect(hits).to_have_count(2)
    expect(page.locator("#hits mark").first).to_have_text("tokenizer")
    expect(page.locator("#log")).to_be_hidden()
    page.fill("#f-text", "")
    expect(page.locator("#log")).to_be_visible()
    # threads: listed, and one click shows a thread's messages
    tab(page, "threads")
    row = page.locator("#threads tr", has_text="parser")
    expect(row).to_contain_text("lead, lynx")
    row.locator("button").click()
    expect(page.locator("#tab-messages")).to_be_visible()
    expect(visible).to_have_count(2)


# --- live views ------------------------------------------------------------------------
def test_S22_console_board_follows_claims_reservations_and_directives_live(
    console: Opener, swarm: Swarm
) -> None:
    page = console(swarm.id)
    tab(page, "board")
    expect(page.locator("#claims")).to_contain_text("no key is claimed")
    # made while the board is open: no reload, no polling
    swarm.lynx.claim_key("src/app.py", 600)
    expect(page.locator("#claims tr", has_text="src/app.py")).to_contain_text("lynx")
    swarm.otter.reserve(["tests/**"], shared=True, ttl=600, reason="fixing the suite")
    row = page.locator("#reservations tr", has_text="tests/**")
    expect(row).to_contain_text("shared")
    expect(row).to_contain_text("fixing the suite")
    swarm.lead.directive("role:coder", "Run the linter before every commit.")
    expect(page.locator("#directives li", has_text="Run the linter")).to_contain_text("in force")
    swarm.lead.post("Stand-up: lynx on app.py.")
    expect(page.locator("#posts li", has_text="Stand-up")).to_be_visible()
    expect(page.locator("#board-count")).to_have_text("2")
    # a release by its holder, and an expiry (no commit at all), disappear too
    swarm.lynx.release_key("src/app.py", 1)
    expect(page.locator("#claims")).to_contain_text("no key is claimed")
    swarm.lead.claim_key("deploy", 1.0)
    expect(page.locator("#claims tr", has_text="deploy")).to_be_visible()
    expect(page.locator("#claims")).to_contain_text("no key is claimed")
    page.click("#journal-box summary")
    expect(page.locator("#journal tr", has_text="deploy").first).to_contain_text("expired")


def test_S13_console_participants_and_queues_follow_live(
    console: Opener, swarm: Swarm, store: Store
) -> None:
    page = console(swarm.id)
    tab(page, "people")

    def cell(address: str, column: str) -> Any:
        index = ["address", "agent", "role", "status", "waiting", "in flight", "retried",
                 "quarantined", "sent / min", "last seen"].index(column) + 1  # fmt: skip
        return page.locator(f"#people tbody tr:has(td:first-child:text-is('{address}')) "
                            f"td:nth-child({index})")  # fmt: skip

    expect(cell("otter", "status")).to_have_text("running")
    # a newcomer appears; mail to it shows as waiting, then in flight
    wren, _ = trusted.join(store, swarm.id, "wren", agent="reviewer", role="reviewer")
    expect(cell("wren", "agent")).to_have_text("reviewer")
    swarm.lead.send("wren", "first")
    swarm.lead.send("wren", "second")
    expect(cell("wren", "waiting")).to_have_text("2")
    expect(cell("lead", "sent / min")).to_have_text("2")
    lease = wren.claim(limit=1, lease=600)
    # an inbox claim rings no doorbell (the hot path stays as it was): the next
    # commit in the space, or the watcher's safety net, brings it in
    swarm.otter.send("lead", "nudge")
    expect(cell("wren", "in flight")).to_have_text("1")
    expect(cell("wren", "waiting")).to_have_text("1")
    wren.release(lease.lease_token)
    expect(cell("wren", "retried")).to_have_text("1")
    # a status change and a departure, live
    wren.set_status("idle")
    expect(cell("wren", "status")).to_have_text("idle")
    wren.leave()
    expect(page.locator("#people tbody tr", has_text="wren")).to_have_count(0)
    page.check("#show-left")
    expect(cell("wren", "status")).to_have_text("left")
    expect(page.locator("#summary")).to_contain_text("3 live of 4 participants")


def test_S1_console_spaces_pane_is_filled_after_login_and_follows_live(
    console: Opener, op: Operator
) -> None:
    first = op.create_space("session").id
    page = console()
    link = page.locator(f".space-link[data-id={first}]")
    expect(link).to_contain_text("running")
    expect(page.locator("#spaces-count")).not_to_have_text("")
    # created, stopped and archived while the console is open
    later = op.create_space("agentiflow").id
    expect(page.locator(f".space-link[data-id={later}]")).to_contain_text("agentiflow")
    expect(page.locator("#spaces .space-link").first).to_have_attribute("data-id", later)
    op.stop_space(first)
    expect(link).to_contain_text("stopped")
    op.archive_space(first)
    expect(link).to_contain_text("archived")
    link.click()
    expect(page.locator("#space-title")).to_have_text(first)
    expect(page.locator("#space-state")).to_contain_text("archived")
    expect(page.locator("#send-form")).to_be_hidden()


# --- operator actions, each behind a confirmation -------------------------------------------
def test_S22_console_releases_a_claim_after_confirming_and_escape_cancels(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    grant = swarm.lynx.claim_key("src/app.py", 600)
    page = console(swarm.id)
    tab(page, "board")
    row = page.locator("#claims tr", has_text="src/app.py")
    row.locator("button").click()
    expect(page.locator("#confirm-title")).to_have_text("Release the claim on src/app.py?")
    page.keyboard.press("Escape")
    expect(page.locator("#confirm")).to_be_hidden()
    assert [c.key for c in op.claims(swarm.id)] == ["src/app.py"]
    row.locator("button").click()
    confirm(page, reason="lynx is stuck")
    expect(page.locator("#claims")).to_contain_text("no key is claimed")
    last = op.claim_journal(swarm.id)[-1]
    assert (last.event, last.fence, last.reason) == (
        "released",
        grant.fence,
        "operator: lynx is stuck",
    )


def test_S37_console_releases_a_path_reservation_after_confirming(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    held = swarm.otter.reserve(["src/parser/**"], ttl=600)[0]
    page = console(swarm.id)
    tab(page, "board")
    page.locator("#reservations tr", has_text="src/parser/**").locator("button").click()
    expect(page.locator("#confirm-text")).to_contain_text("otter holds it exclusive")
    confirm(page)
    expect(page.locator("#reservations")).to_contain_text("no path is reserved")
    assert op.reservations(swarm.id) == []
    last = op.claim_journal(swarm.id)[-1]
    assert (last.key, last.event, last.fence) == ("path src/parser/**", "released", held.fence)


def test_S9_console_lifts_another_participants_directive(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    issued = swarm.lead.directive("role:coder", "Freeze the API.")
    page = console(swarm.id)
    tab(page, "board")
    card = page.locator("#directives li", has_text="Freeze the API.")
    expect(card).to_contain_text("in force")
    card.locator("button").click()
    confirm(page)
    expect(card).to_contain_text("lifted")
    expect(card.locator("button")).to_have_count(0)
    (entry,) = [b for b in op.board(swarm.id) if b.id == issued.id]
    assert entry.in_force is False
    lift = op.log(swarm.id)[-1]
    assert (lift.kind, lift.sender, lift.ref, lift.via) == ("retract", "operator", issued.id, "cp")
    assert "Freeze the API." not in [item.body for item in swarm.lynx.next_turn().items]


def test_S15_console_requeues_a_quarantined_delivery(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    sent = swarm.lead.send("lynx", "parse this: ???")
    lease = swarm.lynx.claim(limit=1, lease=600)
    swarm.lynx.quarantine(lease.lease_token, sent.id, "cannot parse it")
    page = console(swarm.id)
    expect(page.locator("#quarantine-count")).to_have_text("1")
    tab(page, "quarantine")
    row = page.locator("#quarantine tr", has_text="cannot parse it")
    expect(row).to_contain_text("lynx")
    row.locator("button").click()
    confirm(page)
    expect(page.locator("#quarantine")).to_contain_text("nothing is quarantined")
    expect(page.locator("#quarantine-count")).to_have_text("")
    assert op.queue_stats(swarm.id).quarantine == 0
    assert [d.body for d in swarm.lynx.claim(limit=5).deliveries] == ["parse this: ???"]


def test_S1_console_stops_then_archives_a_space_after_confirming(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    swarm.lynx.claim_key("src/app.py", 600)
    page = console(swarm.id)
    page.click("#stop-space")
    expect(page.locator("#confirm-text")).to_contain_text("3 participants will be recorded as left")
    confirm(page)
    expect(page.locator("#space-state")).to_contain_text("stopped")
    expect(page.locator("#send-form")).to_be_hidden()
    expect(page.locator(f".space-link[data-id={swarm.id}]")).to_contain_text("stopped")
    assert op.get_space(swarm.id).state == "stopped"
    assert op.claims(swarm.id) == []
    page.click("#archive-space")
    expect(page.locator("#confirm-text")).to_contain_text("final")
    confirm(page)
    expect(page.locator("#space-state")).to_contain_text("archived")
    expect(page.locator("#archive-space")).to_be_hidden()
    assert op.get_space(swarm.id).state == "archived"


def test_S27_console_rotates_the_join_key_and_shows_the_new_one_once(
    console: Opener, op: Operator, store: Store
) -> None:
    created = op.create_space("workflow")
    page = console(created.id)
    page.click("#rotate-key")
    confirm(page)
    secret = page.locator("#secret-value")
    expect(secret).not_to_have_text("")
    new_key = secret.inner_text()
    assert new_key != created.join_key
    _, joined = Agent.join(store, created.id, "wren", join_key=new_key)
    assert joined.address == "wren"
    from broker import errors

    with pytest.raises(errors.AuthError):
        Agent.join(store, created.id, "moth", join_key=created.join_key)
    page.keyboard.press("Escape")
    expect(page.locator("#secret")).to_be_hidden()
    expect(page.locator("#secret-value")).to_have_text("")  # shown once, then gone


# --- keyboard, narrow and wide, CSP -----------------------------------------------------------
def test_console_is_keyboard_usable_enter_sends_and_focus_is_visible(
    console: Opener, swarm: Swarm, op: Operator
) -> None:
    page = console(swarm.id)
    page.focus("#send-to")
    page.keyboard.type("lynx")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "send-thread"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "send-text"
    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    page.keyboard.press("Enter")
    expect(page.locator("#log li", has_text="first line")).to_contain_text("delivered to lynx")
    assert op.log(swarm.id)[-1].body == "first line\nsecond line"
    expect(page.locator("#send-text")).to_have_value("")
    # tabs by the arrow keys; the focused control shows its focus ring
    page.focus("#tab-btn-messages")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.id") == "tab-btn-people"
    expect(page.locator("#tab-people")).to_be_visible()
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")


@pytest.mark.parametrize("viewport", [NARROW, WIDE], ids=["360px", "wide"])
def test_console_fits_a_360px_window_and_a_wide_screen(
    console: Opener, swarm: Swarm, viewport: dict[str, int]
) -> None:
    swarm.lead.send("lynx", "Please refactor src/app.py; tests first.", thread="refactor")
    swarm.lynx.send("lead", "On it. Claiming src/app.py.", thread="refactor")
    swarm.lynx.claim_key("src/app.py", 600)
    swarm.otter.reserve(["tests/**"], ttl=600, reason="fixing the suite")
    swarm.lead.directive("role:coder", "Run the linter before every commit.")
    swarm.lead.send(["lynx", "ghost"], "Who else is here?")
    page = console(swarm.id, viewport=viewport)
    expect(page.locator("#log li:not([hidden])")).to_have_count(4)
    width = viewport["width"]
    if os.environ.get("BROKER_SCREENSHOT"):  # the README's pictures
        page.screenshot(path=str(DOCS / ("console-narrow.png" if width < 720 else "console.png")))
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for sel in ("#send-text", "#send-form button[type=submit]", "#log li:last-child"):
        expect(page.locator(sel)).to_be_in_viewport(ratio=1)  # whole, without scrolling the page
    assert page.evaluate("document.documentElement.scrollHeight") <= viewport["height"]
    if width < 720:  # the spaces fold away once a space is open
        expect(page.locator("#spaces")).to_be_hidden()
    else:
        expect(page.locator("#spaces")).to_be_visible()
    tab(page, "board")
    expect(page.locator("#claims tr", has_text="src/app.py")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_console_pages_carry_a_strict_content_security_policy(srv: Server) -> None:
    with srv.client() as c:
        for path in ("/", "/static/console.js", "/static/console.css"):
            csp = c.get(path).headers["content-security-policy"]
            assert "script-src 'self'" in csp and "style-src 'self'" in csp, path
            assert "unsafe" not in csp, path
    static = Path(__file__).resolve().parents[3] / "broker/frontends/http/static"
    page = (static / "index.html").read_text()
    assert "<script>" not in page and " style=" not in page and " on" + "click=" not in page
    script = (static / "console.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script


def test_console_tests_fail_rather_than_skip_without_chromium_in_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", "/nonexistent/chromium")
    why = _missing()
    assert why is not None and "/nonexistent/chromium" in why
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="chromium is required in CI"):
        require_browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no chromium at /nonexistent/chromium"):
        require_browser()
