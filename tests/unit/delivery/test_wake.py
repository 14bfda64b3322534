"""S20: waiting for mail is fast and cheap across processes, and no wake-up is lost.

The waiters here announce each step through the doorbell's test hook
(``wake._hook``: "enter", "sleep", "woke"), so a test sends only once the
waiter is provably asleep, and checks *what* woke it: the doorbell ("rung"),
the change marker read on entry ("changed"), the safety tick ("tick") or the
polling fallback ("polled"). No assertion is about time: a latency is printed,
never compared. With doorbells that never ring, the "rung" tests fail (the
waiter is woken by the safety tick instead); with the change marker read at
``wait()`` instead of before the check, the "window" tests fail (the waiter
sleeps through a commit that landed between its check and its wait).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trusted
from conftest import open_store

from broker import Agent, Operator, Store, errors
from broker.delivery import doorbells, wake
from broker.delivery.follow import follow_log
from broker.model.records import LogEntry
from broker.spaces import spaces

HELPER = str(Path(__file__).parents[2].joinpath("wake_waiter.py"))


class Pair:
    """A space with a sender ``a`` and a recipient ``b`` (and their tokens)."""

    def __init__(self, store: Store, **settings: Any) -> None:
        self.store = store
        self.space = Operator(store).create_space("workflow", **settings).id
        self.a, ja = trusted.join(store, self.space, "w/a")
        self.b, jb = trusted.join(store, self.space, "w/b")
        self.a_token, self.b_token = ja.token, jb.token
        self.b_key = wake.participant_key(self.b.identity.participant_id)


@pytest.fixture
def two(store: Store) -> Pair:
    return Pair(store)


def send_from_another_connection(agent: Agent, to: str, body: str) -> None:
    """Commit from another thread (its own connection): the waiting thread's
    change marker sees it, as it sees other processes' commits."""
    th = threading.Thread(target=agent.send, args=(to, body))
    th.start()
    th.join(30)
    assert not th.is_alive()


def killed_writer(url: str, pair: Pair, body: str) -> None:
    """A writer process that commits a send to ``b`` and is SIGKILLed before it
    rings the doorbell: a commit that rings nobody."""
    proc = subprocess.run(
        [sys.executable, HELPER, "killed-writer", url, pair.space, "a", pair.a_token, "b", body],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -9, proc.stderr


class WaiterProcess:
    """``tests/wake_waiter.py waiter ...`` with its hook events read line by line."""

    def __init__(
        self, mode: str, url: str, pair: Pair, wait: float = 30.0, cwd: Path | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, HELPER, "waiter", mode, url, pair.space, "b", pair.b_token, str(wait)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put({"eof": True})

    def next(self) -> dict[str, Any]:
        try:
            got = self.lines.get(timeout=60)
        except queue.Empty:
            raise AssertionError("the waiter process said nothing for 60 s") from None
        if "eof" in got:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"the waiter process ended early: {err[-2000:]}")
        return got

    def until(self, event: str) -> dict[str, Any]:
        while True:
            got = self.next()
            if got.get("event") == event:
                return got

    def result(self) -> list[str]:
        while True:
            got = self.next()
            if "result" in got:
                return list(got["result"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.fixture
def waiter_process(db_url: str) -> Iterator[Callable[..., WaiterProcess]]:
    started: list[WaiterProcess] = []

    def start(mode: str, pair: Pair, wait: float = 30.0, cwd: Path | None = None) -> WaiterProcess:
        w = WaiterProcess(mode, db_url, pair, wait, cwd)
        started.append(w)
        return w

    try:
        yield start
    finally:
        for w in started:
            w.close()


def _woken_by_the_doorbell(w: WaiterProcess, send: Callable[[], Any]) -> float:
    """Send once the waiter is asleep; assert its doorbell woke it; the latency in ms."""
    w.until("sleep")  # registered, checked, change marker read: about to block
    before = time.time_ns()
    send()
    woke = w.until("woke")
    assert woke["woke"] == "rung", woke  # not the safety tick: the doorbell rang
    return (woke["ns"] - before) / 1e6


# --- the doorbell wakes a waiter in another process -------------------------------------------
def test_S20_claim_wait_in_another_process_is_woken_by_the_doorbell_of_a_send(
    two: Pair, waiter_process: Callable[..., WaiterProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    w = waiter_process("claim", two)
    ms = _woken_by_the_doorbell(w, lambda: two.a.send("b", "ring"))
    assert w.result() == ["ring"]
    with capsys.disabled():
        print(f"\nS20 claim wake: {ms:.2f} ms from before the send to the waiter's return")


def test_S20_a_waiter_in_another_working_folder_is_rung_all_the_same(tmp_path: Path) -> None:
    # The doorbell folder is found from the database's absolute path, never
    # from the working folder: an agent started elsewhere still hears the ring.
    # A short store path, so the folder is the one beside the database (a
    # test's usual tmp_path is too long for that: the per-user folder is used).
    short = Path(tempfile.mkdtemp(prefix="w"))
    store = open_store(f"sqlite:///{short / 'b.db'}")
    try:
        assert wake.root_path(store).startswith(f"{os.path.realpath(short)}/")
        pair = Pair(store)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        assert Path.cwd() != elsewhere
        w = WaiterProcess("claim", f"sqlite:///{short / 'b.db'}", pair, cwd=elsewhere)
        try:
            _woken_by_the_doorbell(w, lambda: pair.a.send("b", "ring"))
            assert w.result() == ["ring"]
        finally:
            w.close()
    finally:
        store.close()
        shutil.rmtree(short)


def test_S20_next_turn_wait_in_another_process_is_woken_by_the_doorbell_of_a_broadcast(
    two: Pair, waiter_process: Callable[..., WaiterProcess]
) -> None:
    w = waiter_process("turn", two)
    _woken_by_the_doorbell(w, lambda: two.a.send("broadcast", "wake up"))
    assert w.result() == ["wake up"]


def test_S20_a_log_follower_in_another_process_is_woken_by_the_doorbell_of_its_space(
    two: Pair, waiter_process: Callable[..., WaiterProcess]
) -> None:
    w = waiter_process("follow", two)
    _woken_by_the_doorbell(w, lambda: two.a.send("b", "logged"))
    assert w.result() == ["logged"]


def test_S20_a_log_follower_is_woken_by_the_doorbell_of_a_seen_receipt(
    two: Pair, waiter_process: Callable[..., WaiterProcess]
) -> None:
    # A receipt is a log row like any other (S18): its commit rings the space.
    sent = two.a.send("b", "read me").id
    turn = two.b.next_turn()
    assert turn.id is not None
    w = waiter_process("follow", two)  # its cursor is past "read me"
    _woken_by_the_doorbell(w, lambda: two.b.seen(turn.id))
    assert w.result() == [json.dumps([sent])]


def test_S20_a_waiter_on_one_inbox_is_not_rung_by_mail_for_another(store: Store, two: Pair) -> None:
    other, _ = trusted.join(store, two.space, "w/c")
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert waiter.polling is False
        assert wake.ring_keys(store, [wake.participant_key(other.identity.participant_id)]) == 0
        assert wake.ring_keys(store, [two.b_key]) == 1
        assert waiter.wait(30) is True and waiter.woke == "rung"


# --- no lost wake-up -------------------------------------------------------------------------
def test_S20_a_commit_that_rings_nobody_between_the_check_and_the_wait_wakes_the_waiter_at_once(
    store: Store,
    db_url: str,
    two: Pair,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The lost wake-up of issue 17: the change marker must be read before the
    check, so a commit in the window is seen on entry to wait() even when its
    writer died before ringing (before the fix: wait(12) returned False)."""
    events: list[str] = []
    monkeypatch.setattr(wake, "_hook", lambda w, e: events.append(e), raising=False)
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert two.b.claim().deliveries == []  # the check: nothing yet
        killed_writer(db_url, two, "in the window")  # ... then a commit that rings nobody
        t0 = time.perf_counter()
        assert waiter.wait(12) is True
        ms = (time.perf_counter() - t0) * 1000
        assert (waiter.woke, events) == ("changed", ["enter", "woke"])  # never went to sleep
    assert [d.body for d in two.b.claim().deliveries] == ["in the window"]
    with capsys.disabled():
        print(f"\nS20 commit in the window, rang nobody: wait() returned after {ms:.3f} ms")


def test_S20_claim_wait_sees_a_commit_that_rang_nobody_landing_just_before_its_wait(
    db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if events == ["enter"]:  # claim checked the inbox and is about to wait: commit now
            killed_writer(db_url, two, "in the window")

    monkeypatch.setattr(wake, "_hook", hook)
    got = two.b.claim(wait=12)
    assert [d.body for d in got.deliveries] == ["in the window"]
    assert events == ["enter", "woke"]  # woken on entry, without sleeping


def test_S20_next_turn_wait_sees_a_commit_that_rang_nobody_landing_just_before_its_wait(
    db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if events == ["enter"]:
            killed_writer(db_url, two, "in the window")

    monkeypatch.setattr(wake, "_hook", hook)
    turn = two.b.next_turn(wait=12)
    assert [i.body for i in turn.items] == ["in the window"]
    assert events == ["enter", "woke"]


def test_S20_a_commit_that_rings_nobody_during_the_sleep_is_taken_by_the_safety_tick(
    store: Store, db_url: str, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net: a ring lost while the waiter sleeps costs at most one tick."""
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if events == ["enter", "sleep"]:  # asleep (about to block): commit, ring nobody
            killed_writer(db_url, two, "while asleep")

    monkeypatch.setattr(wake, "SAFETY_S", 0.05)
    monkeypatch.setattr(wake, "_hook", hook)

    def check_and_wait() -> tuple[bool, str]:
        with wake.Waiter(store, [two.b_key]) as waiter:
            assert two.b.claim().deliveries == []
            return waiter.wait(3600), waiter.woke  # only a tick (~SAFETY_S) can end it

    assert _in_thread(check_and_wait, timeout=60) == (True, "tick")
    assert events == ["enter", "sleep", "woke"]
    assert [d.body for d in two.b.claim().deliveries] == ["while asleep"]


def test_S20_traffic_for_others_does_not_turn_a_waiter_into_a_poller(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change seen on entry wakes the waiter once; seen again on the next
    entry (others keep committing) it sends the waiter to sleep until a ring."""
    events: list[str] = []

    def hook(w: wake.Waiter, event: str) -> None:
        events.append(event)
        if event == "enter":  # someone else commits during every check
            send_from_another_connection(two.b, "a", "not for the waiter")
        elif event == "sleep":
            wake.ring_keys(store, [two.b_key])

    monkeypatch.setattr(wake, "_hook", hook)
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert waiter.wait(30) is True and waiter.woke == "changed"
        assert waiter.wait(30) is True and waiter.woke == "rung"
    assert events == ["enter", "woke", "enter", "sleep", "woke"]


# --- the polling fallback ---------------------------------------------------------------------
@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A place where Unix sockets cannot be bound (some network file systems)."""

    def refuse(path: str) -> None:
        raise OSError(95, "Operation not supported", path)

    monkeypatch.setattr(doorbells, "_bind", refuse)


@pytest.mark.usefixtures("no_sockets")
def test_S20_without_sockets_a_commit_in_the_window_is_seen_by_the_poller_at_once(
    store: Store, two: Pair
) -> None:
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert waiter.polling is True
        assert two.b.claim().deliveries == []
        send_from_another_connection(two.a, "b", "in the window")
        assert waiter.wait(12) is True and waiter.woke == "changed"
    assert [d.body for d in two.b.claim().deliveries] == ["in the window"]


@pytest.mark.usefixtures("no_sockets")
def test_S20_without_sockets_claim_wait_polls_the_change_marker_and_wakes_on_a_commit(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    asleep = threading.Event()
    monkeypatch.setattr(wake, "_hook", lambda w, e: e == "sleep" and asleep.set())
    sender = threading.Thread(target=lambda: asleep.wait(30) and two.a.send("b", "polled"))
    sender.start()
    try:
        got = two.b.claim(wait=30)
    finally:
        sender.join(30)
    assert [d.body for d in got.deliveries] == ["polled"]


@pytest.mark.usefixtures("no_sockets")
def test_S20_without_sockets_a_quiet_wait_times_out(store: Store, two: Pair) -> None:
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert waiter.wait(0.05) is False and waiter.woke == "timeout"


# --- doorbells of dead waiters ----------------------------------------------------------------
def test_S20_the_socket_of_a_killed_waiter_is_removed_by_the_next_ring(
    store: Store, db_url: str, two: Pair
) -> None:

    def killed_waiter() -> str:
        out = subprocess.run(
            [sys.executable, HELPER, "bound", db_url, two.b_key],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == -9, out.stderr
        dead = str(json.loads(out.stdout)["path"])
        assert os.path.exists(dead)  # it died holding its doorbell
        return dead

    dead = killed_waiter()
    result = two.a.send("b", "for a dead waiter")
    assert result.reached == ["b"]  # the send is not hurt by the dead doorbell ...
    assert not os.path.exists(dead)  # ... which it removed
    dead = killed_waiter()
    # Beside its socket, the mark a writer that found its queue full left (never read).
    lost = os.path.join(wake.root_path(store), os.path.basename(dead) + ".lost")
    os.close(os.open(lost, os.O_WRONLY | os.O_CREAT, 0o600))
    assert wake.ring_keys(store, [two.b_key]) == 0  # a dead doorbell is not counted as rung
    assert not os.path.exists(dead) and not os.path.exists(lost)


def test_S20_a_closed_waiter_leaves_no_socket_and_no_folder_behind(store: Store, two: Pair) -> None:
    with wake.Waiter(store, [two.b_key, wake.space_key(two.space)]) as waiter:
        paths = list(waiter.paths)
        sock = waiter.socket_path
        assert len(paths) == 2 and all(os.path.exists(p) for p in [*paths, sock])
    # The process's doorbell and its keys' markers outlive their last waiter by LINGER_S.
    doorbells.release_idle()
    assert not any(os.path.exists(p) or os.path.exists(os.path.dirname(p)) for p in paths)
    assert not os.path.exists(sock)
    assert sorted(os.listdir(wake.root_path(store))) == ["slots"]
    mm = doorbells._maps[wake.root_path(store)]  # the counts writers read: back to nobody
    assert (mm[doorbells.slot(two.b_key)], mm[doorbells.slot(wake.space_key(two.space))]) == (0, 0)


def test_S20_a_wait_that_comes_back_to_its_key_finds_the_marker_in_place_and_is_rung(
    store: Store, two: Pair
) -> None:
    """A key's marker rests LINGER_S after its last waiter (an agent's next
    long-poll costs no file work), and a waiter back on it is rung as before;
    the doorbell's thread removes a marker that rested its time, while the
    doorbell itself stays for the process's other waiters."""
    other = wake.Waiter(store, [wake.space_key(two.space)])  # keeps the doorbell open
    try:
        with wake.Waiter(store, [two.b_key]) as first:
            marker = first.paths[0]
            made = os.stat(marker).st_ino
        assert os.stat(marker).st_ino == made  # resting, not removed ...
        assert os.stat(marker).st_size == 0  # ... and counting no waiter
        with wake.Waiter(store, [two.b_key]) as again:
            assert again.paths == [marker] and os.stat(marker).st_ino == made
            assert os.stat(marker).st_size == 1
            assert wake.ring_keys(store, [two.b_key]) == 1
            assert again.wait(5) and again.woke == "rung"
        deadline = time.monotonic() + 10 * doorbells.LINGER_S
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(os.path.dirname(marker))  # removed by the doorbell's thread
        assert doorbells._maps[wake.root_path(store)][doorbells.slot(two.b_key)] == 0
        assert os.path.exists(other.paths[0]) and other.socket_path is not None
        assert os.path.exists(other.socket_path)
    finally:
        other.close()


# --- follow -----------------------------------------------------------------------------------
def _in_thread(fn: Callable[[], Any], timeout: float = 30) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it does not return."""
    out: list[Any] = []
    th = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    th.start()
    th.join(timeout)
    assert not th.is_alive(), f"still running after {timeout} s"
    return out[0]


def bodies(batches: list[list[LogEntry]]) -> list[str]:
    return [e.body for batch in batches for e in batch if e.kind == "direct"]


def test_S7_follow_on_a_stopped_space_yields_what_was_logged_and_returns(
    store: Store, two: Pair
) -> None:
    for i in range(3):
        two.a.send("b", f"m{i}")
    spaces.stop(store, two.space)
    batches = _in_thread(lambda: list(follow_log(store, two.space)))
    assert bodies(batches) == ["m0", "m1", "m2"]


def test_S7_a_lagging_follower_drains_everything_logged_before_the_stop_and_returns(
    store: Store, two: Pair
) -> None:
    two.a.send("b", "first")
    follower = follow_log(store, two.space)
    seen = [e.body for e in _in_thread(lambda: next(follower))]
    assert seen == ["first"]
    # While the follower's consumer is busy, more is logged and the space stops.
    for i in range(5):
        two.a.send("b", f"late {i}")
    spaces.stop(store, two.space)
    rest = _in_thread(lambda: list(follower))
    assert bodies(rest) == [f"late {i}" for i in range(5)]


def test_S7_follow_idle_timeout_ends_a_quiet_follow_even_while_other_spaces_are_busy(
    store: Store, two: Pair
) -> None:
    other = Pair(store, inbox_cap=10**9)
    stop = threading.Event()

    def chatter() -> None:  # commits that move the change marker but concern another space
        while not stop.is_set():
            other.a.send("b", "elsewhere")

    two.a.send("b", "backlog")
    th = threading.Thread(target=chatter)
    th.start()
    try:
        batches = _in_thread(lambda: list(follow_log(store, two.space, idle_timeout=0.3)))
    finally:
        stop.set()
        th.join(30)
    assert bodies(batches) == ["backlog"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_S33_follow_refuses_an_idle_timeout_that_is_not_a_finite_number_of_seconds(
    store: Store, two: Pair, bad: float
) -> None:
    with pytest.raises(errors.InvalidInput, match="idle_timeout"):
        next(follow_log(store, two.space, idle_timeout=bad))


# --- processes: exit and fork ------------------------------------------------------------------
@pytest.mark.parametrize("rings", [True, False])
def test_S20_a_writer_process_exits_without_a_word_whether_it_rang_or_not(
    two: Pair, db_url: str, rings: bool
) -> None:
    """The doorbell sender socket (made by the first ring of another process's
    doorbell: this test's waiter) is closed at exit, and a process that never
    rang has none to close: nothing on stderr, even with warnings turned into
    errors. (A process's own waiters are rung without a socket.)"""
    code = (
        "import sys\n"
        "from broker import Agent, Store\n"
        "from broker.delivery import wake\n"
        "url, space, token, rings = sys.argv[1:5]\n"
        "store = Store(url)\n"
        "Agent.connect(store, space, 'a', token).send('b', 'from a writer process')\n"
        "assert (wake._sender is not None) is (rings == 'yes')\n"
    )
    with wake.Waiter(two.store, [two.b_key] if rings else []):
        out = subprocess.run(
            [sys.executable, "-W", "error", "-c", code, db_url, two.space, two.a_token]
            + ["yes" if rings else "no"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert (out.returncode, out.stderr) == (0, "")
    assert [d.body for d in two.b.claim().deliveries] == ["from a writer process"]


def test_S20_a_forked_child_waits_and_is_rung_like_any_process(
    store: Store, db_url: str, two: Pair
) -> None:
    """fork() after the parent used its doorbells (its lock and sender are not
    shared with the child): the child's claim(wait) is woken by the parent's send."""
    import multiprocessing as mp

    with wake.Waiter(store, [two.b_key]):  # the parent holds doorbell state at fork()
        two.a.send("b", "before the fork")
        assert [d.body for d in two.b.claim().deliveries] == ["before the fork"]
    fork = mp.get_context("fork")
    asleep, out = fork.Event(), fork.Queue()

    def child() -> None:
        wake._hook = lambda w, e: e == "sleep" and asleep.set()
        got = Agent(Store(db_url), two.b.identity).claim(wait=30)
        out.put(([d.body for d in got.deliveries], wake._hook is not None))

    proc = fork.Process(target=child)
    proc.start()
    try:
        assert asleep.wait(30)
        with wake.Waiter(store, [two.b_key]):  # this process waits on the key too
            assert wake.ring_keys(store, [two.b_key]) == 2  # two processes' doorbells rung
        two.a.send("b", "after the fork")  # the child, rung for nothing, waits on for this
        assert out.get(timeout=60) == (["after the fork"], True)
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(30)


# --- ringing: what a writer does and does not do ------------------------------------------------
def test_S20_writers_never_create_doorbell_files(store: Store, two: Pair) -> None:
    """Only waiters make the doorbell folder: a store nobody waited on gets no
    files from sends (and rings nobody)."""
    two.a.send("b", "nobody waits")
    assert not os.path.exists(wake.root_path(store))
    assert wake.ring_keys(store, [two.b_key, wake.space_key(two.space)]) == 0


def test_S41_every_waiter_on_a_key_is_rung_through_the_one_doorbell_of_its_process(
    store: Store, two: Pair
) -> None:
    with wake.Waiter(store, [two.b_key]) as w1, wake.Waiter(store, [two.b_key]) as w2:
        assert w1.socket_path == w2.socket_path and w1.paths == w2.paths
        assert wake.ring_keys(store, [two.b_key]) == 1  # one process, one datagram
        assert (w1.wait(30), w1.woke, w2.wait(30), w2.woke) == (True, "rung", True, "rung")


def test_S41_a_process_rings_its_own_waiters_directly_without_a_datagram(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's own commits concern its own long-polls: their bells are rung
    before ``ring_keys`` returns, with no socket made and no datagram through
    the process's doorbell thread."""
    monkeypatch.setattr(wake, "_sender", None)  # no sender socket yet in this process
    with wake.Waiter(store, [two.b_key]) as w:
        assert not w.bell.rung
        assert wake.ring_keys(store, [two.b_key]) == 1
        assert (w.bell.rung, wake._sender) == (True, None)
        assert (w.wait(30), w.woke) == (True, "rung")


def test_S41_one_ring_of_more_keys_than_a_datagram_holds_rings_every_waiter_of_the_process(
    store: Store,
) -> None:
    """A process waiting on 100 keys (about 2.8 kB of key names) is sent them
    in two datagrams by one ring: every key arrives whole, so every waiter is rung."""
    keys = [wake.participant_key(f"{i:026d}") for i in range(100)]
    assert len(" ".join(keys)) > wake.DATAGRAM_MAX
    with contextlib.ExitStack() as stack:
        waiters = [stack.enter_context(wake.Waiter(store, [k])) for k in keys]
        assert wake.ring_keys(store, keys) == 1  # one process, all its datagrams sent
        for i, w in enumerate(waiters):  # one by one: a waiter never rung fails at once
            assert (i, w.wait(10), w.woke) == (i, True, "rung")


def test_S41_a_ring_packs_whole_keys_into_datagrams_of_at_most_DATAGRAM_MAX_bytes() -> None:
    """Keys are never cut and never padded; a datagram is filled up to exactly
    ``DATAGRAM_MAX`` bytes, and one byte more starts the next one."""
    size = wake.DATAGRAM_MAX
    first = [f"k{i:025d}" for i in range(size // 27)]  # 26 bytes each, with a space 27
    room = size - len(" ".join(first)) - 1  # the last key that fills the datagram exactly
    for last, expected in [("x" * room, 1), ("x" * (room + 1), 2)]:
        keys = [*first, last]
        sent = list(wake._payloads(keys))
        assert [p.decode().split(" ") for p in sent] == (
            [keys] if expected == 1 else [first, [last]]
        )
        assert [len(p) for p in sent][:1] == [size if expected == 1 else size - room - 1]
    assert list(wake._payloads([])) == []
    assert list(wake._payloads(["a", "b"])) == [b"a b"]


def test_S20_a_key_sharing_a_busy_slot_does_not_stop_the_keys_after_it_from_ringing(
    store: Store, two: Pair
) -> None:
    """Slots are hash buckets: a key whose bucket is counted by another key's
    waiter has no folder; the ring must go on to the next keys."""
    slot = doorbells.slot(two.b_key)
    collider = next(k for k in (f"c{i}" for i in range(10**6)) if doorbells.slot(k) == slot)
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert wake.ring_keys(store, [collider, two.b_key]) == 1
        assert waiter.wait(30) is True and waiter.woke == "rung"


def test_S20_a_waiter_that_never_drains_its_doorbell_never_blocks_a_writer(
    store: Store, two: Pair
) -> None:
    with wake.Waiter(store, [two.b_key]), wake.Waiter(store, [two.b_key]):
        rung = _in_thread(lambda: [wake.ring_keys(store, [two.b_key]) for _ in range(3000)])
    assert rung == [1] * 3000  # a full queue counts as rung: its process rings everyone


def test_S20_a_slot_counts_the_processes_waiting_on_it_saturates_at_255_and_then_stays_maybe_waiting(
    store: Store, two: Pair
) -> None:
    slot = doorbells.slot(two.b_key)
    with contextlib.ExitStack() as stack:
        waiters = [stack.enter_context(wake.Waiter(store, [two.b_key])) for _ in range(256)]
        root = wake.root_path(store)
        mm = doorbells._maps[root]
        assert mm[slot] == 1 and all(not w.polling for w in waiters)  # one process
        assert wake.ring_keys(store, [two.b_key]) == 1
        for _ in range(300):  # as 300 other processes would
            doorbells.count_in(root, slot, +1)
        assert mm[slot] == 255
    assert mm[slot] == 255  # saturated: writers keep listing the folder (harmless)


def test_private_files_a_writer_never_rings_through_a_symlinked_key_folder(
    store: Store, two: Pair, tmp_path: Path
) -> None:
    import socket

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    # Named like a process's doorbell, so a writer that followed the link would send to it.
    listener.bind(str(elsewhere / "4242-abcdef"))
    listener.setblocking(False)
    try:
        with wake.Waiter(store, [two.b_key]) as waiter:
            folder = os.path.dirname(waiter.paths[0])
            os.rename(folder, folder + ".moved")
            os.symlink(elsewhere, folder)  # the key's folder now leads elsewhere
            assert wake.ring_keys(store, [two.b_key]) == 0
            with pytest.raises(BlockingIOError):
                listener.recv(8)  # nothing was sent through the link ...
            # ... and nothing removed there: a writer that listed the linked folder
            # would take the listener for a dead doorbell of its own and unlink it.
            assert (elsewhere / "4242-abcdef").exists()
            os.unlink(folder)
            os.rename(folder + ".moved", folder)
    finally:
        listener.close()


@pytest.mark.parametrize("hostile", ["\ud800", "a\udfffb", "../x\ud800"])
def test_private_files_ids_with_lone_surrogates_still_have_doorbells(
    store: Store, hostile: str
) -> None:
    pkey, skey = wake.participant_key(hostile), wake.space_key(hostile)
    assert pkey.isalnum() and skey.isalnum()
    with wake.Waiter(store, [pkey, skey]) as waiter:
        assert not waiter.polling
        assert wake.ring_keys(store, [pkey]) == 1


def test_S20_a_waiter_whose_folder_the_last_waiter_just_removed_binds_again(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race between a new waiter's mkdir and the last old waiter's rmdir:
    the bind finds no folder, and the waiter makes it again and binds."""
    real = wake.runfiles.private_dir
    raced: list[str] = []

    def racing(path: str, *, create: bool = True) -> bool:
        made = real(path, create=create)
        if os.path.basename(path) == two.b_key and not raced:
            raced.append(path)
            os.rmdir(path)  # the last waiter of this key leaves, right now
        return made

    monkeypatch.setattr(wake.runfiles, "private_dir", racing)
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert raced and not waiter.polling and os.path.exists(waiter.paths[0])
        assert wake.ring_keys(store, [two.b_key]) == 1
        assert waiter.wait(30) is True and waiter.woke == "rung"


@pytest.mark.parametrize("first", ["changed", "rung"])
def test_S20_after_a_wake_quiet_ticks_let_the_waiter_sleep_to_its_timeout(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """Each return re-reads the change marker, so the ticks of the next wait
    compare with it: with nothing committed since, they do not wake anyone."""
    monkeypatch.setattr(wake, "SAFETY_S", 0.02)
    events: list[str] = []
    monkeypatch.setattr(wake, "_hook", lambda w, e: events.append(e))
    with wake.Waiter(store, [two.b_key]) as waiter:
        if first == "changed":
            # A commit that rings none of its keys (mail for someone else): no
            # ring of its own can land after the change woke it.
            send_from_another_connection(two.b, "a", "moves the change marker")
        else:
            wake.ring_keys(store, [two.b_key])  # a ring with nothing committed
        assert waiter.wait(30) is True and waiter.woke == first
        events.clear()
        assert waiter.wait(0.3) is False and waiter.woke == "timeout"
        assert events[:2] == ["enter", "sleep"]  # it did sleep, through quiet ticks


@pytest.mark.usefixtures("no_sockets")
def test_S20_without_sockets_a_commit_during_the_sleep_is_polled(
    store: Store, two: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hook(w: wake.Waiter, event: str) -> None:
        if event == "sleep" and not sent:
            sent.append(1)
            send_from_another_connection(two.a, "b", "while polling")

    sent: list[int] = []
    monkeypatch.setattr(wake, "_hook", hook)
    with wake.Waiter(store, [two.b_key]) as waiter:
        assert waiter.wait(30) is True and waiter.woke == "polled"


def test_S20_when_one_of_two_waiters_on_a_key_leaves_the_other_is_still_rung(
    store: Store, two: Pair
) -> None:
    with wake.Waiter(store, [two.b_key]) as stays:
        with wake.Waiter(store, [two.b_key]):
            pass
        assert wake.ring_keys(store, [two.b_key]) == 1
        assert stays.wait(30) is True and stays.woke == "rung"
