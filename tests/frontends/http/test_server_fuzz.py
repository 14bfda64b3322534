"""An OpenAPI-driven fuzz run (schemathesis) against a real ``broker serve``
(spec §Served mode, S33): generated requests to every endpoint of the served
document, with the right credential for each. Required: no server error, and
every response (status, content type, body) matches the document.

Marked ``fuzz``: the default suite stays fast; CI runs it (``.ci/run``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trusted

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import checks  # noqa: E402

from broker import Operator, Store  # noqa: E402
from tests.served import Server  # noqa: E402

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Store]]:
    srv = Server(tmp_path_factory.mktemp("fuzz") / "home", "--quiet")
    store = Store(srv.url)
    try:
        yield srv, store
    finally:
        store.close()
        srv.stop()


CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


def test_S33_fuzz_every_endpoint_no_server_error_and_responses_match_the_document(
    served: tuple[Server, Store],
) -> None:
    srv, store = served
    schema = schemathesis.openapi.from_url(srv.base + "/openapi.json")
    op = Operator(store)
    failures: list[str] = []
    ran: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path
        if path.endswith("/stream"):
            continue  # an SSE stream never ends by itself: tested in test_server.py
        sid = op.create_space("session").id
        agent, joined = trusted.join(store, sid, "lynx", tools=["*", "board.*"])
        trusted.join(store, sid, "otter")
        agent.send("otter", "a message to claim")
        secret = joined.token if "/agent" in path or path == "/api/me" else srv.key

        run = _fuzzer(operation, srv, sid, secret)
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - collect every endpoint's failure
            failures.append(f"{operation.method.upper()} {path}: {exc}")
        ran.append(f"{operation.method.upper()} {path}")
    assert len(ran) >= 25, ran
    assert not failures, "\n\n".join(failures)


def _fuzzer(operation: Any, srv: Server, sid: str, secret: str) -> Any:
    """The hypothesis test of one operation, with its space and credential."""

    @given(case=operation.as_strategy())
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    def run(case: Any) -> None:
        if isinstance(case.body, dict) and isinstance(case.body.get("wait"), int | float):
            case.body["wait"] = min(case.body["wait"], 0.05)  # a long-poll would only wait
        params = case.path_parameters
        if params and "id" in params and len(str(case.body)) % 3:  # mostly the real space
            params["id"], params["kind"] = sid, "sessions"
        case.call_and_validate(
            base_url=srv.base,
            headers={"Authorization": f"Bearer {secret}"},
            checks=CHECKS,
            timeout=60,
        )

    return run
