#!/bin/sh
# Pause for a human, driven by cron: a worker may write files only with approval.
# Cron's `agent-run --all` runs its turn, which pauses at the write (status P, no
# lease held); the operator, from another shell, sees the request and approves it;
# the next cron run finishes the same turn. Offline with the scripted model; uses
# $AGENTCTL_DB (or the default database) and the shipped write_file tool.
#
#   * * * * *  agent-run --all            # the crontab line (examples/crontab)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-scripted:$here/models/approval.jsonl}
work=${WORKDIR:-$(mktemp -d)}

agent-fork -n "${NAME:-reporter}" --allow write_file --ask write_file --cwd "$work" --shared \
    -m "$model" "Write the report" >/dev/null

echo "cron, 09:00: agent-run --all"
agent-run --all --no-prompt >/dev/null 2>&1 || true
agent-ps -o name,stat --no-headers | grep "${NAME:-reporter}"

echo "the operator, in another shell: agent-answer"
agent-answer
agent-answer --approve "$(agent-answer -q | head -n 1)"

echo "cron, 09:01: agent-run --all"
agent-run --all --no-prompt
echo "$work/report.md:"
cat "$work/report.md"
