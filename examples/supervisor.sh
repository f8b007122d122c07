#!/bin/bash
# A supervisor loop: keep giving turns to every agent with pending input until
# there is nothing left to do (or ROUNDS runs out), reporting who is alive.
# A temporary failure (exit 75) is retried on the next round, as cron would.
set -u
rounds=${ROUNDS:-10}
for ((i = 1; i <= rounds; i++)); do
	agent-run --all -j "${JOBS:-2}" >/dev/null 2>&1     # the replies, the errors
	status=$?
	case $status in
	0) echo "round $i: ran" ;;
	1) echo "round $i: nothing to do"; break ;;
	75) echo "round $i: busy or failing, retrying" ;;
	*) echo "round $i: agent-run --all exited $status" >&2 ;;
	esac
	sleep "${PAUSE:-0}"
done
agent-ps -o name,stat,role,mail --format tsv
