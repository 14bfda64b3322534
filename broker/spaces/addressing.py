"""Addresses and ``to`` forms (S3, S6), pure: no database here.

A codename is a path of run names from the space's root: ``cobalt-harbor/lynx#2``.
The address is the part below the root with retry attempts dropped, so a
retried run keeps its inbox. A retry attempt is written as an ``@N`` suffix on
a segment (``lynx@2`` is the second attempt of ``lynx``); ``#N`` is a unit
index and stays. An agentiflow's lead has the address ``lead``.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Literal

from broker.errors import InvalidInput
from broker.record_type import record

# The words of the ``to`` forms that are not addresses (S3, S6, S29): no run can
# take one as its address, in any case or width ("Operator", "ＬＥＡＤ"), so a
# person reading a log never mistakes a run for the operator. ``lead`` is held
# only through the lead flag. One definition: the join and the importer both
# ask ``reads_reserved``.
RESERVED = frozenset({"operator", "broadcast", "parent", "lead"})
# fullmatch, never match with "$": "$" also matches before a final newline.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*(#[0-9]+)?")
_ATTEMPT = re.compile(r"@[0-9]+")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,199}")

TargetKind = Literal["address", "name", "role", "step", "parent", "lead", "operator", "broadcast"]


@record
class Target:
    kind: TargetKind
    value: str  # the address, agent name or step name; empty for the fixed forms
    text: str  # as written, for the outcome record


def address_of(codename: str, *, lead: bool = False, agentiflow: bool = False) -> str:
    """The address of a codename (S3): below the root, retry attempts dropped.

    In an agentiflow the lead is the root run, so a unit ``flow/heron>lynx#1``
    is ``lynx#1``; in a workflow the root is the run itself, so a step's
    sub-agent ``flow/lynx>otter#1`` is ``lynx>otter#1``."""
    if lead:
        return "lead"
    text = codename.strip()
    if not text:
        raise InvalidInput("codename is empty")
    below = text.split("/", 1)[1] if "/" in text else text
    below = _ATTEMPT.sub("", below)
    parts = below.split(">")
    if agentiflow and len(parts) > 1:
        parts = parts[1:]
    for part in parts:
        if not _SEGMENT.fullmatch(part):
            raise InvalidInput(
                f"codename {codename!r} has a bad segment {part!r}: use letters, digits, '_', '.', '-', "
                "an optional #N unit index and @N retry attempt, joined by '>'"
            )
    address = ">".join(parts)
    if reads_reserved(address):
        raise InvalidInput(f"address {address!r} is reserved and cannot be taken by a run")
    if len(address) > 200:
        raise InvalidInput("address is longer than 200 characters")
    return address


def normal_address(address: str) -> str:
    """An address as a person reads it: width and case folded, invisible
    characters and surrounding space dropped ("Ｏperator\u200b" reads "operator")."""
    text = unicodedata.normalize("NFKC", address)
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Cc"))
    return text.strip().casefold()


# Characters a reader takes for one another in an address, once case is folded
# (an uppercase I is a lowercase l in many fonts), and pairs that read as one.
_LOOKALIKE = str.maketrans({"0": "o", "1": "l", "i": "l"})
_LOOKALIKE_PAIRS = (("rn", "m"), ("vv", "w"))


def reads_as(address: str) -> str:
    """What ``address`` reads as to a person (S45): case and width folded,
    invisible characters dropped (``normal_address``), and look-alike
    characters taken as one (``Victim``, ``vict1m``, ``VlCTIM`` all read as
    ``victim``). Two participants of one space never read alike."""
    text = normal_address(address).translate(_LOOKALIKE)
    for pair, one in _LOOKALIKE_PAIRS:
        text = text.replace(pair, one)
    return text


_UNIT_INDEX = re.compile(r"#[0-9]+\Z")


def reads_reserved(address: str) -> bool:
    """Whether ``address`` reads as one of the reserved words (``RESERVED``),
    a unit index aside: ``OPERATOR#2`` in a log line reads as the operator."""
    text = normal_address(address)
    return text in RESERVED or _UNIT_INDEX.sub("", text) in RESERVED


def is_address(text: str) -> bool:
    """Whether ``text`` is an address a join can give (S3): ``lead``, or
    segments of letters, digits, '_', '.', '-' with an optional #N, joined by
    '>', not a reserved name, at most 200 characters. The importer holds the
    addresses it reads to this, so no imported participant has one a join
    would refuse (control characters, spaces, ``role:`` forms)."""
    if text == "lead":
        return True
    return (
        0 < len(text) <= 200
        and not reads_reserved(text)
        and all(_SEGMENT.fullmatch(part) for part in text.split(">"))
    )


def agentiflow_address(codename: str) -> str:
    """The address of a full codename (``root/...``) in an agentiflow, where the
    root run is the lead: ``flow/heron`` is ``lead``, ``flow/heron>lynx#1`` is ``lynx#1``."""
    below = codename.strip().split("/", 1)[-1]
    if ">" not in _ATTEMPT.sub("", below):
        return "lead"
    return address_of(codename, agentiflow=True)


def parse_targets(forms: list[str]) -> tuple[list[Target], bool]:
    """Parse every ``to`` form (S6); also whether they are ``broadcast``, which
    is an address of its own and never combined with another. A refusal names
    the field: ``to``."""
    try:
        targets = [parse_target(t) for t in forms]
    except InvalidInput as exc:
        exc.fields.setdefault("field", "to")
        raise
    bcast = any(t.kind == "broadcast" for t in targets)
    if bcast and len(targets) > 1:
        raise InvalidInput("'broadcast' cannot be combined with other addresses", field="to")
    return targets, bcast


@lru_cache(maxsize=4096)
def parse_target(text: str) -> Target:
    """Parse one ``to`` form (S6). Resolution against the space happens at send.
    Cached: a form parses to the same (immutable) target every time, and a
    sender names the same few over and over; a refusal is never cached."""
    t = text.strip()
    if not t:
        raise InvalidInput("empty address in 'to'")
    if t in ("parent", "lead", "operator", "broadcast"):
        return Target(t, "", t)  # type: ignore[arg-type]
    for prefix, kind in (("role:", "role"), ("step:", "step")):
        if t.startswith(prefix):
            name = t[len(prefix) :]
            if not _NAME.fullmatch(name):
                raise InvalidInput(f"bad {kind} name in {t!r}")
            return Target(kind, name, t)  # type: ignore[arg-type]
    if "/" in t or ">" in t or "#" in t or "@" in t:
        return Target("address", address_of(t), t)
    if not _NAME.fullmatch(t):
        raise InvalidInput(f"bad address {t!r}")
    # A bare name: an address if someone has it, else every live runner of that agent.
    return Target("name", t, t)
