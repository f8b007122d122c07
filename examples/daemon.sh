#!/bin/sh
# A daemon restarted after a failure, and its parent told, offline.
#
# The "model" is a scripted one: it refuses the request (as an API refusing a
# bad request would) until its rules are mended, then answers. The daemon is forked with
# --restart on-failure: the failed turn is voided, its input pending again, and
# the next run after the backoff (AGENTCTL_BACKOFF, here 0 so that it is at
# once) takes it again. Its parent, the lead, gets one failure notice.
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export AGENTCTL_DB="${AGENTCTL_DB:-$dir/agents.db}" AGENTCTL_BACKOFF=0
printf '%s\n' \
	'{"match": "failed", "steps": [{"content": "noted: my daemon restarted"}]}' \
	'{"match": "watch the queue", "steps": [{"fail": "error"}]}' > "$dir/model.jsonl"

echo '$ agent-fork -n lead ...; agent-fork -p lead -n watcher -r daemon --restart on-failure ...'
agent-fork -n lead -m "scripted:$dir/model.jsonl" >/dev/null
agent-fork -p lead -n watcher -r daemon --restart on-failure --max-restarts 3 \
	-m "scripted:$dir/model.jsonl" "watch the queue" >/dev/null

echo '$ agent-run watcher          # the model refuses: a failed turn, restarted'
agent-run watcher 2>&1 || echo "(agent-run exited $?)"
agent-ps -o name,stat,restarts,failure --parent lead

echo '$ (the model is mended) agent-run --all   # the lead reads the notice; the watcher runs again'
sed -i 's/{"fail": "error"}/{"content": "queue watched"}/' "$dir/model.jsonl"
agent-run --all 2>/dev/null || true
agent-ps -o name,stat,restarts --parent lead
agent-replay watcher | tail -n 2
echo '$ agent-mail -a lead'
agent-mail -a -o kind,subject lead
