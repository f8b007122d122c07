#!/bin/sh
# Fan-out / fan-in: a lead forks workers (through its fork tool), each worker
# runs one turn, the lead collects their results and summarises.
# Offline with the scripted model; uses $AGENTCTL_DB (or the default database).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-scripted:$here/models/fanout.jsonl}

lead=$(agent-fork -n "${LEAD:-lead}" -r lead -m "$model" "Plan a survey of SQLite WAL internals")
agent-run "$lead" >/dev/null                 # the lead forks its workers
agent-ps -q --parent "$lead" | xargs -n 1 agent-run >/dev/null   # fan out: one turn each
agent-run "$lead"                            # fan in: exit notices, one model call
agent-wait "$lead" --timeout 0 >/dev/null 2>&1 || true
