"""Helper processes for tests/soak/test_chaos.py (run as scripts, never imported by pytest).

``worker URL SPACE ADDRESS TOKEN OUT LEASE BATCH STOP SLOW_AT``: claims from the
inbox until the file STOP exists, then finishes the batch it holds and exits.
Before acking it appends ``C <message id> <lease token> <pid> <lease expiry>``
for every claimed message to OUT and fsyncs, so a SIGKILL at any point leaves a
record of every claim whose ack may have committed. After the ack it appends
``A <token>``; an ack refused with LeaseLost appends ``L <token> <lost ids...>``
and the held rest is acked. So every lease a live worker held has an ``A`` or
``L`` line: one without either was held by a worker that was killed.

``holder URL SPACE ADDRESS TOKEN GO LEASE``: claims one message, prints
``{"id", "token"}``, works until the file GO exists (SIGSTOP freezes it there),
then acks and prints ``ok`` or ``lease_lost``.

About 3% of the worker's batches take longer than the lease, and batch number
SLOW_AT (counted from 0; -1: none) always does: leases also expire under live
holders, whose acks must then be refused.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time


def worker(
    url: str,
    space: str,
    address: str,
    token: str,
    out: str,
    lease: str,
    batch: str,
    stop: str,
    slow_at: str,
) -> None:
    from broker import Store, errors
    from broker.delivery import inbox
    from broker.model.inputs import ClaimInput
    from broker.spaces import participants

    store = Store(url)
    ident = participants.authenticate(store, space, address, token)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    me = os.getpid()
    rng = random.Random(me)
    batches = 0
    while not os.path.exists(stop):
        got = inbox.claim(store, ident, ClaimInput(limit=int(batch), lease=float(lease), wait=0.5))
        if not got.deliveries:
            continue
        ids = [d.id for d in got.deliveries]
        os.write(
            fd, "".join(f"C {i} {got.lease_token} {me} {got.expires_at}\n" for i in ids).encode()
        )
        os.fsync(fd)  # the record is durable before the ack can commit
        # "Work"; now and then longer than the lease, so leases also expire under a
        # live holder (its ack is then refused with LeaseLost).
        slow = batches == int(slow_at) or rng.random() < 0.03
        time.sleep(float(lease) * 1.5 if slow else rng.random() * 0.01)
        batches += 1
        try:
            inbox.ack(store, ident, got.lease_token, ids)
            os.write(fd, f"A {got.lease_token}\n".encode())
        except errors.LeaseLost as exc:
            lost = list(exc.fields.get("lost", []))
            os.write(fd, f"L {got.lease_token} {' '.join(lost)}\n".encode())
            held = [i for i in ids if i not in lost]
            if held:
                inbox.ack(store, ident, got.lease_token, held)
                os.write(fd, f"A {got.lease_token}\n".encode())


def holder(url: str, space: str, address: str, token: str, go: str, lease: str) -> None:
    from broker import Store, errors
    from broker.delivery import inbox
    from broker.model.inputs import ClaimInput
    from broker.spaces import participants

    store = Store(url)
    ident = participants.authenticate(store, space, address, token)
    got = inbox.claim(store, ident, ClaimInput(limit=1, lease=float(lease)))
    print(json.dumps({"id": got.deliveries[0].id, "token": got.lease_token}), flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    try:
        inbox.ack(store, ident, got.lease_token)
        print("ok", flush=True)
    except errors.LeaseLost:
        print("lease_lost", flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"worker": worker, "holder": holder}[mode](*args)
