#!/usr/bin/env bash
# Mutation testing of one broker module with mutmut 2 (see docs/mutation.md).
#
#   scripts/mutation.sh MODULE [WORKDIR]      e.g.  scripts/mutation.sh wake
#
# mutmut 2 writes each mutant into the file on disk, so the processes the
# tests start (CLI calls, helper scripts, forked workers) run the mutant too.
# It therefore runs in a copy of this checkout (WORKDIR, a new temp folder by
# default), never in the checkout itself, with PYTHONPATH pointing at the copy.
# Each mutant runs the module's own tests (below), fastest killers first, and
# stops at the first failure (-x), through scripts/mutation_runner.py (every
# failure exits 1, which is all mutmut 2 counts as a kill; a hang is killed
# with all its processes). Not part of the default test run.
#
# Output in WORKDIR: results.txt (mutmut results), survivors.diff (every
# surviving or timed-out mutant as a diff), summary.txt (the counts).
set -euo pipefail

module=${1:?usage: scripts/mutation.sh MODULE [WORKDIR]}
src=$(cd "$(dirname "$0")/.." && pwd)
paths=""  # the files to mutate, named by each selection

case "$module" in
  # SQLite only (-k 'not postgresql'): the PostgreSQL halves of the contract
  # modules run the same module code on another dialect, at several times the
  # cost per test (a database made and dropped each); a mutant only they could
  # kill shows up as a survivor and is looked at by hand.
  wake)  # the doorbell tests, and the S20 tests of the inbox and turns; the
    # S41 tests (one doorbell per process, a full queue's mark), which alone
    # kill the datagram-packing and full-queue mutants of wake.py
    paths="broker/delivery/wake.py"
    tests="tests/unit/delivery/test_wake.py tests/unit/delivery/test_doorbell_files.py tests/unit/delivery/test_doorbell_shared.py tests/contract/test_inbox.py tests/contract/test_turns.py tests/contract/test_board.py -k '(S20 or S7 or S33 or S41 or private_files) and not postgresql'" ;;
  inbox)
    paths="broker/delivery/inbox.py"
    tests="tests/unit/delivery/test_stale_lease.py tests/contract/test_inbox_edges.py tests/contract/test_inbox.py tests/unit/delivery/test_model.py tests/unit/delivery/test_recovery.py tests/contract/test_trust_attacks.py tests/contract/test_queue_edges.py tests/unit/api/test_aio_keeper.py tests/contract/test_turns.py tests/contract/test_import.py -k 'not cli and not postgresql and (not test_trust_attacks or lease_owner or S45) and (not test_turns or S26)'" ;;
  messages)  # the log's reads, the send path and the recipient resolution; and the
    # importer's log rows (restore_rows: the aliases of revision 0018), test_import.py
    paths="broker/mail/messages.py,broker/mail/sending.py,broker/mail/recipients.py"
    tests="tests/contract/test_send_edges.py tests/unit/mail/test_send_statements.py tests/contract/test_send.py tests/contract/test_log.py tests/contract/test_send_many.py tests/contract/test_limits.py tests/contract/test_mail.py tests/contract/test_inbox.py tests/soak/test_concurrency.py tests/contract/test_refusal_fields.py tests/unit/spaces/test_shares.py tests/contract/test_trust_clock.py tests/contract/test_trust_attacks.py tests/contract/test_board.py tests/contract/test_import.py -k 'not postgresql and not mcp'" ;;
  board)  # board.py and claims.py (the key claims moved out of board.py), and
    # test_board_edges.py, written from the third stop's survivors (the kills
    # docs/mutation.md credits to it were checked by hand, never by a run);
    # the holds' own tests (S41 caps, the operator's release), which alone kill
    # the re-grant and operator-reason mutants of claims.py
    paths="broker/board/posts.py,broker/board/claims.py"
    tests="tests/contract/test_board.py tests/contract/test_board_edges.py tests/contract/test_grants.py tests/unit/board/test_bounds.py tests/unit/board/test_holds.py -k 'not postgresql'" ;;
  turns)  # and the S33/S16 edge tests of next_turn's wait, limit and transaction
    paths="broker/delivery/turns.py"
    tests="tests/contract/test_turns.py tests/unit/teammates/test_runtime.py tests/contract/test_queue_edges.py tests/contract/test_inbox_edges.py -k 'not postgresql'" ;;
  participants)  # and the takeover, liveness and trust tests, which alone kill
    # the continuation, pid and look-alike-address mutants of participants.py
    paths="broker/spaces/participants.py"
    tests="tests/contract/test_participants.py tests/contract/test_grants.py tests/contract/test_mail.py tests/frontends/cli/test_cli_core.py tests/contract/test_takeover.py tests/contract/test_liveness.py tests/contract/test_trust_attacks.py tests/unit/spaces/test_trust.py -k 'not postgresql and not mcp'" ;;
  *)
    echo "no test selection for module '$module': add one to $0" >&2
    exit 2 ;;
esac
paths=${paths:?}

work=${2:-$(mktemp -d "${TMPDIR:-/tmp}/broker-mutation-$module-XXXXXX")}
mkdir -p "$work"
if [[ -e "$work/.mutmut-cache" ]]; then
  echo "resuming the run in $work (its copy of the code is kept)" >&2
else
  # The checkout as it is (committed or not), without caches and earlier runs.
  tar -C "$src" --exclude=.git --exclude=.mutmut-cache --exclude=.pytest_cache \
      --exclude=__pycache__ --exclude=.hypothesis --exclude=mutants -cf - . | tar -C "$work" -xf -
fi
cd "$work"
export PYTHONPATH="$work"
# Bytecode for every module, checked against its source's hash at each import
# (not its mtime, which a quick succession of mutants of one size can repeat),
# and none written during the run: unchanged modules load from .pyc in every
# process the tests start, and the mutant is always compiled from its source.
python -m compileall -q --invalidation-mode checked-hash broker tests scripts > /dev/null
export PYTHONDONTWRITEBYTECODE=1
echo "mutating $paths in $work; tests: $tests" >&2

# Which tests run each line, in the test process or in one it starts
# (scripts/mutation_map.py), built once on the unmutated copy: each mutant
# then runs only the tests that reach its line, fastest first.
export MUTATION_MAP="$work/map.json"
if [[ ! -e "$MUTATION_MAP" ]]; then
  eval "python scripts/mutation_map.py '$MUTATION_MAP' '$paths' $tests"
fi
cp scripts/mutmut_config.py mutmut_config.py
# A mutant that survives its narrowed tests runs the whole selection too
# (scripts/mutation_runner.py), with the same arguments as the baseline.
export MUTATION_SELECTION="-x -q -p no:cacheprovider $tests"
# A warm pytest (scripts/mutation_forkserver.py) forks a child per test run.
export MUTATION_FORKSERVER="$work/fork.sock"
rm -f "$MUTATION_FORKSERVER"
python scripts/mutation_forkserver.py "$MUTATION_FORKSERVER" "$MUTATION_MAP" > forkserver.log 2>&1 &
forkserver=$!
trap 'kill "$forkserver" 2>/dev/null || true' EXIT
for _ in $(seq 600); do [[ -S "$MUTATION_FORKSERVER" ]] && break; sleep 0.1; done

set +e
mutmut run \
  --paths-to-mutate "$paths" \
  --tests-dir tests \
  --runner "python scripts/mutation_runner.py -x -q -p no:cacheprovider $tests" \
  --simple-output --no-progress
status=$?
set -e

mutmut results > results.txt || true
python - <<'EOF2'
import sqlite3
import subprocess

db = sqlite3.connect(".mutmut-cache")
rows = db.execute("SELECT status, count(*) FROM Mutant GROUP BY status").fetchall()
with open("summary.txt", "w") as out:
    print("generated", sum(n for _, n in rows), file=out)
    for status, n in sorted(rows):
        print(status, n, file=out)
# Read the ids first and close: an open cursor keeps a read lock on the cache,
# and `mutmut show` writes to it (pony creates its tables), so every show
# failed with "database is locked" and left an empty diff.
survivors = db.execute(
    "SELECT id, status FROM Mutant WHERE status NOT IN ('ok_killed', 'untested', 'skipped') "
    "ORDER BY id"
).fetchall()
db.close()
with open("survivors.diff", "w") as out:
    for (mid, status) in survivors:
        diff = subprocess.run(["mutmut", "show", str(mid)], capture_output=True, text=True).stdout
        out.write(f"### mutant {mid}: {status}\n{diff}\n")
EOF2
cat summary.txt
echo "results: $work/results.txt, survivors: $work/survivors.diff (mutmut exit $status)" >&2
