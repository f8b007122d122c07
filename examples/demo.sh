#!/bin/sh
# The tour, offline, on $AGENTCTL_DB (make demo gives it a database of its own,
# .demo/agents.db in the checkout): a lead agent forks two workers through
# its tools, cron-style runs execute them, the lead collects their results
# and files them as a shared document, within a token budget; then replay
# across a clear, deferred mail, a cascade kill, and copy-on-write workspaces
# (examples/workspaces.sh: two workers, a diff, a merge). The model is the
# scripted one (examples/models/fanout.jsonl): no key, no network.
set -e
here=$(cd "$(dirname "$0")" && pwd)
model="scripted:$here/models/fanout.jsonl"
# Each step is printed as it is run, the very line, then run (its comment after #).
run() { printf '\n$ %s\n' "$1"; eval "$1"; }

# Agents left by an interrupted earlier demo.
agent-kill --cascade demo-lead >/dev/null 2>&1 || true
agent-wait demo-lead >/dev/null 2>&1 || true

run 'agent-fork -n demo-lead -r lead --budget 20000 -m "$model" -s "You coordinate research." "Plan a survey of SQLite WAL internals"'
run 'agent-run demo-lead                 # one turn: the lead forks two workers'
run 'agent-ps -f                         # the tree; each worker has its prompt pending'
run 'agent-run --all -j 2                # one turn for every agent with pending input'
run 'agent-ps -f                         # the workers (tasks) exited: zombies; the lead has mail'
run 'agent-run demo-lead                 # the lead reads both exit notices in ONE model call'
run 'agent-ps -f -o name,stat,budget | grep -e NAME -e demo-lead   # tokens spent of the budget'
run 'agent-doc ls surveys/; agent-doc get surveys/sqlite-wal        # what the lead filed'
run 'agent-replay --ranges w-checkpoints  # walk backwards, play forwards'

run 'agent-kill -s HUP demo-lead         # a clear: later turns see nothing before it'
run 'agent-send demo-lead "Plan the next chapter"; agent-replay demo-lead'
run 'agent-send --in 1h demo-lead "Check on the survey"; agent-ps -o name,wake | grep -e NAME -e demo-lead'
run 'agent-mail -a demo-lead             # the deferred mail is not there yet'

run 'agent-fork -p demo-lead -n demo-idle; agent-kill --cascade demo-lead'
run 'agent-ps -a -f -o id,name,parent,stat,exit_code | grep -e demo- -e w-'
run 'agent-wait demo-lead || echo "(agent-wait exited $?)"   # collect it (exit 3: it was killed)'
run 'if command -v bwrap >/dev/null; then sh "$here/workspaces.sh"; else echo "(the workspaces need bubblewrap)"; fi   # two workers, a diff, a merge'
