#!/bin/sh
# The tour: a fork tree, the process table, replay across a clear, mail,
# and a cascade kill. Offline; uses the default database ($AGENTCTL_DB or
# ~/.local/share/agentctl/agents.db), and cleans up the agents it made.
set -e
say() { printf '\n$ %s\n' "$*"; }

# A previous, interrupted demo may have left its agents behind.
agent-kill --cascade demo-lead >/dev/null 2>&1 || true
agent-wait demo-lead >/dev/null 2>&1 || true

say 'lead=$(agent-fork -n demo-lead -r lead -s "You coordinate research." "Plan a survey of SQLite WAL internals")'
lead=$(agent-fork -n demo-lead -r lead -s "You coordinate research." "Plan a survey of SQLite WAL internals")
echo "$lead"
say 'agent-fork -p demo-lead -n demo-w1 -r worker "Read about checkpoints"'
agent-fork -p demo-lead -n demo-w1 -r worker "Read about checkpoints"
say 'agent-fork -p demo-lead -n demo-w2 -r worker "Read about the wal-index"'
agent-fork -p demo-lead -n demo-w2 -r worker "Read about the wal-index"

say 'agent-ps -f                         # the process table as a tree'
agent-ps -f
say 'agent-replay demo-w1               # the lead'"'"'s prompt is inherited, not copied'
agent-replay demo-w1
say 'agent-replay --ranges demo-w1      # walk backwards, play forwards'
agent-replay --ranges demo-w1

say 'agent-kill -s HUP demo-lead        # a clear: later turns see nothing before it'
agent-kill -s HUP demo-lead
say 'agent-fork -p demo-lead -n demo-w3 "Start afresh"'
agent-fork -p demo-lead -n demo-w3 "Start afresh"
say 'agent-replay demo-w3               # skips the lead'"'"'s history before the clear'
agent-replay demo-w3

say 'agent-send demo-lead "w1 is slow, check on it"'
agent-send demo-lead "w1 is slow, check on it"
say 'agent-mail -c demo-lead && agent-mail demo-lead'
agent-mail -c demo-lead && agent-mail demo-lead

say 'agent-kill --cascade demo-lead     # the lead and every descendant'
agent-kill --cascade demo-lead
say 'agent-ps -a -f -o id,name,parent,stat,exit | grep demo-'
agent-ps -a -f -o id,name,parent,stat,exit | grep demo-
say 'agent-wait demo-lead               # collect the zombie (exit 3: it was killed)'
agent-wait demo-lead || echo "(agent-wait exited $?)"
