#!/bin/sh
# The tour, offline, on $AGENTCTL_DB (make demo gives it a database of its own,
# .demo/agents.db in the checkout): a lead agent forks two workers through
# its tools, cron-style runs execute them, the lead collects their results
# and files them as a shared document, within a token budget; then replay
# across a clear, deferred mail, and a cascade kill. The model is the
# scripted one (examples/models/fanout.jsonl): no key, no network.
set -e
here=$(cd "$(dirname "$0")" && pwd)
model="scripted:$here/models/fanout.jsonl"
say() { printf '\n$ %s\n' "$*"; }

# Agents left by an interrupted earlier demo.
agent-kill --cascade demo-lead >/dev/null 2>&1 || true
agent-wait demo-lead >/dev/null 2>&1 || true

say "agent-fork -n demo-lead -r lead --budget 20000 -m $model -s 'You coordinate research.' 'Plan a survey of SQLite WAL internals'"
agent-fork -n demo-lead -r lead --budget 20000 -m "$model" -s "You coordinate research." "Plan a survey of SQLite WAL internals"
say 'agent-run demo-lead                 # one turn: the lead forks two workers'
agent-run demo-lead
say 'agent-ps -f                         # the tree; each worker has its prompt pending'
agent-ps -f
say 'agent-run --all -j 2                # one turn for every agent with pending input'
agent-run --all -j 2
say 'agent-ps -f                         # the workers (tasks) exited: zombies; the lead has mail'
agent-ps -f
say 'agent-run demo-lead                 # the lead reads both exit notices in ONE model call'
agent-run demo-lead
say 'agent-ps -f -o name,stat,budget      # tokens spent of the budget'
agent-ps -f -o name,stat,budget | grep -e NAME -e demo-lead
say 'agent-doc ls surveys/; agent-doc get surveys/sqlite-wal   # what the lead filed'
agent-doc ls surveys/
agent-doc get surveys/sqlite-wal
say 'agent-replay --ranges w-checkpoints  # walk backwards, play forwards'
agent-replay --ranges w-checkpoints

say 'agent-kill -s HUP demo-lead         # a clear: later turns see nothing before it'
agent-kill -s HUP demo-lead
say 'agent-send demo-lead "Plan the next chapter"; agent-replay demo-lead'
agent-send demo-lead "Plan the next chapter" >/dev/null
agent-replay demo-lead
say 'agent-send --in 1h demo-lead "Check on the survey"; agent-ps -o name,wake'
agent-send --in 1h demo-lead "Check on the survey" >/dev/null
agent-ps -o name,wake | grep -e NAME -e demo-lead
say 'agent-mail -a demo-lead             # the deferred mail is not there yet'
agent-mail -a demo-lead

say 'agent-fork -p demo-lead -n demo-idle; agent-kill --cascade demo-lead'
agent-fork -p demo-lead -n demo-idle >/dev/null
agent-kill --cascade demo-lead
say 'agent-ps -a -f -o id,name,parent,stat,exit_code | grep -e demo- -e w-'
agent-ps -a -f -o id,name,parent,stat,exit_code | grep -e demo- -e w-
say 'agent-wait demo-lead                # collect it (exit 3: it was killed)'
agent-wait demo-lead || echo "(agent-wait exited $?)"
