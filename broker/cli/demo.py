"""broker demo: the main job, a real multi-process swarm on the embedded store."""

from __future__ import annotations

import click

from broker.cli._common import emit_json, json_option, main, store


@main.command()
@click.option(
    "--workers", default=4, show_default=True, type=click.IntRange(1, 64), help="Worker processes."
)
@click.option(
    "--messages",
    default=5,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Messages per worker.",
)
@json_option
def demo(workers: int, messages: int, as_json: bool) -> None:
    """Run a small swarm: a lead and worker processes messaging in one space."""
    from broker.demo import run_demo

    if as_json:
        summary = run_demo(store(), workers=workers, messages=messages)
        emit_json(summary)
        return
    with click.progressbar(length=workers * (messages + 1), label="worker messages") as bar:
        seen = 0

        def progress(done: int, total: int) -> None:
            nonlocal seen
            if done > seen:
                bar.update(done - seen)
                seen = done

        summary = run_demo(store(), workers=workers, messages=messages, progress=progress)
    click.echo(f"space         {summary.space}")
    click.echo(f"database      {summary.db}")
    click.echo(f"participants  {summary.participants}")
    click.echo(f"messages      {summary.messages} ({summary.reached_nobody} reached nobody)")
    click.echo(f"wall time     {summary.wall_seconds:.2f} s")
    click.echo("inspect it:")
    for cmd in summary.inspect:
        click.echo(f"  {cmd}")
