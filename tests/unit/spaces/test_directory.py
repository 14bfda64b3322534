"""S25: the directory, through the library behind ``broker dir ...`` and
``broker team status`` (the commands themselves are tested with the CLI).

A directory entry is a participant: registering joins with the directory
fields, unregistering leaves, pruning records stale entries as left.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trusted

from broker import Operator, Store, errors
from broker.spaces import directory, participants


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


@pytest.fixture
def clocked(tmp_path: Path) -> tuple[Store, Clock, str]:
    clock = Clock()
    store = Store(f"sqlite:///{tmp_path / 'dir.db'}", clock=clock)
    space = Operator(store).create_space("session").id
    return store, clock, space


def test_S25_register_keeps_every_field_and_show_finds_the_entry(
    clocked: tuple[Store, Clock, str],
) -> None:
    store, _, space = clocked
    joined = directory.register(
        store,
        space,
        "monkey-a3f7",
        credential=trusted.credential(store),
        role="API integration specialist",
        archetype="interfacer",
        task="Implement OAuth2 flow",
        agent="claude",
        pid=os.getpid(),
    )
    entry = directory.show(store, space, "monkey-a3f7")
    assert (entry.id, entry.address, entry.agent, entry.pid) == (
        joined.participant_id,
        "monkey-a3f7",
        "claude",
        os.getpid(),
    )
    assert (entry.role, entry.archetype, entry.task, entry.status) == (
        "API integration specialist",
        "interfacer",
        "Implement OAuth2 flow",
        "running",
    )
    with pytest.raises(errors.ParticipantNotFound):
        directory.show(store, space, "nobody-here")


def test_S25_every_archetype_of_the_five_registers(clocked: tuple[Store, Clock, str]) -> None:
    store, _, space = clocked
    for i, archetype in enumerate(directory.ARCHETYPES):
        directory.register(
            store,
            space,
            f"a{i}",
            credential=trusted.credential(store),
            role="r",
            archetype=archetype,
            task="t",
        )
    got = {e.address: e.archetype for e in directory.entries(store, space)}
    assert got == {f"a{i}": a for i, a in enumerate(directory.ARCHETYPES)}
    assert len(directory.ARCHETYPES) == 5


def test_S25_unregistered_entries_are_listed_only_when_asked(
    clocked: tuple[Store, Clock, str],
) -> None:
    store, _, space = clocked
    joined = directory.register(
        store,
        space,
        "gone",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
    )
    directory.register(
        store,
        space,
        "stays",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
    )
    directory.unregister(store, participants.authenticate(store, space, "gone", joined.token))
    assert [e.address for e in directory.entries(store, space)] == ["stays"]
    everyone = {e.address: e.status for e in directory.entries(store, space, include_left=True)}
    assert everyone == {"gone": "left", "stays": "running"}


def test_S25_prune_by_age_alone_keeps_entries_whose_process_is_gone(
    clocked: tuple[Store, Clock, str],
) -> None:
    store, clock, space = clocked
    directory.register(
        store,
        space,
        "old",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
    )
    trusted.in_a_gone_process(  # registered by a process that is gone now
        store,
        lambda s: directory.register(
            s,
            space,
            "dead",
            credential=trusted.credential(s),
            role="r",
            archetype="planner",
            task="t",
            pid=os.getpid(),
        ),
    )
    clock.now += timedelta(days=1)  # past the space's lease too: nobody live is pruned by age
    fresh, _ = trusted.join(store, space, "s/fresh")
    pruned = directory.prune(store, space, older_than=20, check_pid=False)
    assert sorted(p.address for p in pruned) == ["dead", "old"]  # both by age
    assert [e.address for e in directory.entries(store, space)] == ["fresh"]


def test_S25_prune_by_process_alone_keeps_old_entries_of_live_processes(
    clocked: tuple[Store, Clock, str],
) -> None:
    store, clock, space = clocked
    directory.register(
        store,
        space,
        "me",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
        pid=os.getpid(),
    )
    trusted.in_a_gone_process(  # registered by a process that is gone now
        store,
        lambda s: directory.register(
            s,
            space,
            "dead",
            credential=trusted.credential(s),
            role="r",
            archetype="planner",
            task="t",
            pid=os.getpid(),
        ),
    )
    clock.now += timedelta(days=30)
    assert [p.address for p in directory.prune(store, space)] == ["dead"]
    assert directory.prune(store, space) == []  # already left: not pruned twice
    reasons = [
        (e.address, e.reason) for e in participants.journal(store, space) if e.event == "left"
    ]
    assert reasons == [("dead", "prune")]


def test_S25_prune_refuses_a_negative_age_and_writes_nothing(
    clocked: tuple[Store, Clock, str],
) -> None:
    store, _, space = clocked
    directory.register(
        store,
        space,
        "x",
        credential=trusted.credential(store),
        role="r",
        archetype="planner",
        task="t",
    )
    with pytest.raises(errors.InvalidInput, match="older_than"):
        directory.prune(store, space, older_than=-1)
    assert [e.address for e in directory.entries(store, space)] == ["x"]


def test_S25_a_process_is_gone_only_when_no_such_pid_exists() -> None:
    assert directory.process_gone(_dead_pid()) is True
    assert directory.process_gone(os.getpid()) is False
    for unknown in (None, 0, -5):
        assert directory.process_gone(unknown) is False  # unknown: never gone
