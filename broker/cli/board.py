"""broker board ...: the shared board of a space (S21-S23)."""

from __future__ import annotations

import click

from broker.cli._common import agent, identity_options, json_option, main, text_arg
from broker.cli.message import run_send


@main.group()
def board() -> None:
    """The shared board: posts, directives, key claims."""


@board.command("post")
@click.option(
    "--to",
    "to",
    multiple=True,
    metavar="ADDR",
    help="Also deliver to these addressees' inboxes (repeatable); none = channel post.",
)
@click.option("--idempotency-key", help="A repeat with the same key returns the first result.")
@identity_options
@json_option
@click.argument("text", nargs=-1, required=True)
def post(
    to: tuple[str, ...],
    idempotency_key: str | None,
    space: str | None,
    as_: str | None,
    token: str | None,
    as_json: bool,
    text: tuple[str, ...],
) -> None:
    """Post TEXT on the board. Exits 1 if addressed and it reached nobody."""
    me = agent(space, as_, token)
    body = text_arg(text)
    run_send(lambda: me.post(body, addressed_to=list(to), idempotency_key=idempotency_key), as_json)
