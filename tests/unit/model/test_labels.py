"""S33 with S31: a name or a label an agent or the operator gives is one
printable line. C0 controls, DEL and C1 controls (U+0080-U+009F: 0x9b is a
one-byte CSI, 0x85 a line break) are refused naming the field, and nothing
is written; message bodies keep theirs (escaped when shown, not refused).
Real SQLite files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trusted

from broker import Agent, Operator, Store, errors
from broker.board import globs

CONTROLS = ["\x01", "\n", "\x1b", "\x7f", "\x85", "\x9b", "\x9f"]


def written(store: Store) -> list[tuple[Any, ...]]:
    """Every row a refused call could have written."""
    with store.read() as t:
        return [
            *(tuple(r) for r in t.all("SELECT * FROM reservations ORDER BY token")),
            *(tuple(r) for r in t.all("SELECT * FROM claim_journal ORDER BY id")),
            *(tuple(r) for r in t.all("SELECT * FROM deliveries ORDER BY rowid")),
            *(tuple(r) for r in t.all("SELECT id, address, agent, role, task FROM participants")),
            *(tuple(r) for r in t.all("SELECT count(*) FROM participant_events")),
        ]


@pytest.mark.parametrize("bad", CONTROLS)
def test_S33_labels_refuse_c0_del_and_c1_naming_the_field_and_write_nothing(
    bad: str, store: Store, space: str, join: Callable[..., Agent]
) -> None:
    lynx = join("lynx")
    lynx.reserve("keep/**")
    Operator(store).send(space, "work", to=["lynx"])
    op = Operator(store)
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: lynx.reserve(f"src/a{bad}b.py"), "pattern"),
        (lambda: lynx.reserve("src/**", reason=f"why{bad}not"), "reason"),
        (lambda: lynx.claim(owner=f"worker{bad}1"), "owner"),
        (lambda: op.release_reservation(space, 1, reason=f"x{bad}"), "reason"),
        # A codename's root is not an address segment: it is checked as a label.
        (lambda: trusted.join(store, space, f"fl{bad}ow/otter"), "codename"),
        (lambda: trusted.join(store, space, f"flow/ot{bad}ter"), "codename"),
    ]
    for field in ("agent", "run_id", "step", "parent", "role", "task"):
        cases.append(
            (lambda f=field: trusted.join(store, space, "otter", **{f: f"x{bad}y"}), field)
        )
    before = written(store)
    for call, field in cases:
        with pytest.raises(errors.InvalidInput) as exc:
            call()
        err = exc.value
        assert (err.code, err.exit_code, err.fields["field"]) == ("invalid_input", 2, field)
        assert bad not in err.message, "the refusal escapes what it names (S31)"
    assert written(store) == before


@pytest.mark.parametrize("bad", CONTROLS)
def test_S37_a_path_to_check_may_hold_control_characters_and_is_matched_like_any_name(
    bad: str, join: Callable[..., Agent], store: Store, space: str
) -> None:
    """A path is only matched, never stored: a file name may hold control
    characters, and a reservation covers them (the git guard cannot be slipped
    past with a name). NUL and lone surrogates are still refused."""
    lynx, otter = join("lynx"), join("otter")
    lynx.reserve("src/**")
    name = f"src/a{bad}b.py"
    [check] = otter.check_paths([name])
    assert (check.path, check.blocked, [r.holder for r in check.held_by]) == (name, True, ["lynx"])
    [free] = Operator(store).check_paths(space, [f"a{bad}b"])
    assert (free.path, free.blocked, free.held_by) == (f"a{bad}b", False, [])
    with pytest.raises(errors.InvalidInput) as exc:  # refused at the API's edge (S33)
        otter.check_paths(["src/a\0b"])
    assert exc.value.fields["field"] == "paths"
    with pytest.raises(errors.InvalidInput):  # refused at the API's edge (broker.model.typecheck)
        otter.check_paths(["src/a\udc80b"])


def test_S33_globs_refuse_every_c1_control_and_accept_printable_latin1() -> None:
    for cp in range(0x80, 0xA0):
        with pytest.raises(errors.InvalidInput) as exc:
            globs.check_pattern(f"src/{chr(cp)}.py")
        assert exc.value.fields["field"] == "pattern"
    assert globs.check_pattern("src/\u00a0é\u00ff.py") == "src/\u00a0é\u00ff.py"


def test_S31_bodies_keep_line_breaks_tabs_and_c1_exactly(
    join: Callable[..., Agent],
) -> None:
    """A body is text, not a label: stored exactly, escaped on display."""
    lynx, otter = join("lynx"), join("otter")
    body = "line one\n\tline two \x85 \x9b[2J end"
    lynx.send("otter", body)
    [item] = otter.next_turn().items
    assert item.body == body
