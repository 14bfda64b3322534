"""broker demo: the main job, a real multi-process swarm on the embedded store."""

from __future__ import annotations

import click

from broker.frontends.cli._common import emit_json, json_option, keyvals, main, store, whole_option


@main.command()
@whole_option("--teammates", 1, 64, 8, "Teammate processes.")
@whole_option("--tasks", 1, 10000, 40, "Tasks on the board.")
@whole_option(
    "--kill", 0, 1, 1, "SIGKILL one teammate mid-run (it is restarted; its turn is redelivered)."
)
@json_option
def demo(teammates: int, tasks: int, kill: int, as_json: bool) -> None:
    """Run a swarm: a lead, teammate processes claiming board tasks, a directive,
    an urgent operator message and a killed teammate; then print a summary."""
    from broker.teammates.demo import run_demo

    if as_json:
        emit_json(run_demo(store(create=True), teammates=teammates, tasks=tasks, kill=kill))
        return
    with click.progressbar(length=tasks, label="tasks done", show_pos=True) as bar:
        seen = 0

        def progress(done: int, total: int) -> None:
            nonlocal seen
            if done > seen:
                bar.update(done - seen)
                seen = done

        s = run_demo(
            store(create=True), teammates=teammates, tasks=tasks, kill=kill, progress=progress
        )
    results = "result" if s.saw_directive == 1 else "results"
    urgent = "result" if s.saw_urgent == 1 else "results"
    keyvals(
        [
            ("space", s.space),
            ("database", s.db),
            ("teammates", f"{s.teammates} processes ({s.restarts} restarted after SIGKILL)"),
            (
                "tasks",
                f"{s.tasks_done}/{s.tasks} done, {s.duplicate_results} done twice (at-least-once)",
            ),
            (
                "saw directive",
                f"{s.saw_directive} {results} reported under the lead's standing directive",
            ),
            ("saw urgent", f"{s.saw_urgent} {urgent} reported after the operator's urgent message"),
            ("messages", f"{s.messages} in the log"),
            ("claims", f"{s.claims} board claims granted"),
            ("redeliveries", s.redeliveries),
            ("quarantined", s.quarantined),
            ("wall time", f"{s.wall_seconds:.2f} s"),
        ]
    )
    click.echo("inspect it:")
    for cmd in s.inspect:
        click.echo(f"  {cmd}")
