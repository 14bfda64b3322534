"""Exporter path traversal (spec §Reliability): names built from addresses, keys and
subjects never leave the export root, whatever they hold."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

import pytest
import spacegen
import sqlrows
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import Operator, Store, errors
from broker.interchange.export import export_mailbox, export_space
from broker.store.filenames import MAX_NAME, inside, make_dirs, safe_name

HOSTILE = [
    "../x",
    "../../../../etc/passwd",
    "/etc/x",
    "a/b",
    "a\\b",
    "nul\x00byte",
    "..",
    ".",
    "",
    ".hidden",
    "-rf",
    "~",
    "%2e%2e",
    "x" * 300,
    "é" * 150,
    "日本語/../../x",
    "line\nbreak",
    "\u202eevil",
    " ",
    "lynx>otter#1",
]


def _ok_component(name: str) -> None:
    assert name not in ("", ".", "..")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".") and not name.startswith("-")
    assert len(name.encode()) <= MAX_NAME
    assert name.isascii() and name.isprintable()


@pytest.mark.parametrize("name", HOSTILE)
def test_safe_name_is_one_harmless_component(name: str) -> None:
    safe = safe_name(name)
    _ok_component(safe)
    if name == "":
        assert safe == "%"
    elif "~" not in safe:
        assert unquote(safe) == name, "uncut names decode back"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_safe_name_of_any_text_is_one_harmless_component(name: str) -> None:
    component = safe_name(name)
    _ok_component(component)  # asserts: no separator, no NUL, not '.'/'..', bounded length
    assert component and "/" not in component


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=200))
def test_safe_name_is_injective(a: str, b: str) -> None:
    if a != b:
        assert safe_name(a) != safe_name(b)


def test_long_names_are_cut_with_a_hash_and_stay_distinct() -> None:
    a, b = "x" * 300, "x" * 299 + "y"
    assert safe_name(a) != safe_name(b)
    assert safe_name(a).startswith("x" * 50) and "~" in safe_name(a)
    assert len(safe_name("%" * 300)) <= MAX_NAME  # never splits a %XX escape
    cut = safe_name("é" * 150)
    assert cut.startswith("%C3%A9") and cut.split("~")[0].endswith("%C3%A9")


def test_inside_refuses_components_that_could_escape(tmp_path: Path) -> None:
    for part in ("..", ".", "", "a/b", "/etc", "a\x00b"):
        with pytest.raises(errors.InvalidInput):
            inside(tmp_path, part)
    assert inside(tmp_path, "ok") == tmp_path.resolve() / "ok"


def _files_outside(tmp: Path, allowed: list[Path]) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(tmp):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if not any(path == a or a in path.parents for a in allowed) and not any(
                path in a.parents for a in allowed
            ):
                out.append(str(path))
    return out


@pytest.fixture
def hostile_space(tmp_path: Path) -> tuple[Store, str]:
    store = spacegen.fresh_store(tmp_path / "db")
    space = Operator(store).create_space("session").id
    pids = []
    for address in HOSTILE:
        if address:
            pids.append(sqlrows.participant(store, space, address, role=address))
    for n, key in enumerate(HOSTILE):
        sqlrows.claim(
            store,
            space,
            key,
            HOSTILE[n % len(HOSTILE)] or "x",
            at="2026-01-01T00:00:00.000000Z",
            expires=sqlrows.FAR_FUTURE,
        )
    for n, subject in enumerate(HOSTILE):
        sqlrows.message(
            store,
            space,
            HOSTILE[n] or "x",
            f"{subject}\nbody {n}",
            deliver_to=[pids[n % len(pids)]],
            reached=["operator"] if n % 3 == 0 else [],
        )
    sqlrows.message(store, space, "x", "to all", kind="broadcast", bcast=True, reached=HOSTILE[:5])
    return store, space


def test_export_with_hostile_addresses_keys_and_subjects_writes_only_inside_the_root(
    hostile_space: tuple[Store, str], tmp_path: Path
) -> None:
    store, space = hostile_space
    root = tmp_path / "root"
    summary = export_space(store, space, root)
    assert summary.live_claims == len(HOSTILE)
    assert summary.participants == len(HOSTILE) - 1
    export_mailbox(store, space, tmp_path / "mroot")
    assert _files_outside(tmp_path, [root, tmp_path / "mroot", tmp_path / "db"]) == []
    for base in (root, tmp_path / "mroot"):
        written = list(base.rglob("*"))
        assert written
        for path in written:
            assert path.resolve().is_relative_to(base.resolve())
            assert len(path.name.encode()) <= 255
            assert not path.is_symlink()
    folder = root / "sessions" / space / "messages"
    claims = sorted(p.name for p in (folder / "board" / "claims").iterdir())
    assert len(claims) == len(HOSTILE) == len(set(claims))
    mailboxes = [p for p in (folder / "mailboxes").iterdir() if p.is_dir()]
    assert len(mailboxes) == len(HOSTILE) - 1


def test_a_symlink_planted_in_the_root_is_refused(
    hostile_space: tuple[Store, str], tmp_path: Path
) -> None:
    store, space = hostile_space
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = make_dirs(root, "sessions", space, "messages")
    (folder / "mailboxes").symlink_to(outside, target_is_directory=True)
    with pytest.raises(errors.InvalidInput, match="outside the export root"):
        export_space(store, space, root)
    assert list(outside.iterdir()) == []
    mail = root / "m"
    mail.mkdir()
    (mail / "mail").symlink_to(outside, target_is_directory=True)
    with pytest.raises(errors.InvalidInput, match="outside the export root"):
        export_mailbox(store, space, mail)
    assert list(outside.iterdir()) == []


def test_a_symlinked_claim_file_is_replaced_not_followed(tmp_path: Path) -> None:
    store = spacegen.fresh_store(tmp_path / "db")
    space = Operator(store).create_space("run").id
    sqlrows.claim(
        store, space, "k", "lynx", at="2026-01-01T00:00:00.000000Z", expires=sqlrows.FAR_FUTURE
    )
    root = tmp_path / "root"
    claims = make_dirs(root, "runs", space, "messages", "board", "claims")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (claims / "k.json").symlink_to(victim)
    with pytest.raises(errors.InvalidInput):
        export_space(store, space, root)
    assert victim.read_text() == "precious"
