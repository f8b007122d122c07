#!/bin/sh
# Agents that work on real files through tools: a lead, granted the file tools in a
# working directory of its own, lists the notes, forks a reader granted read_file only
# (it can't write: its write_file call is an unknown tool for it), and writes a
# summary from what the reader reports. Offline with the scripted model; uses
# $AGENTCTL_DB (or the default database) and the tools shipped with agentctl.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-scripted:$here/models/files.jsonl}
work=${WORKDIR:-$(mktemp -d)}
mkdir -p "$work/notes"
echo "The WAL appends frames at its end; a checkpoint copies them back." > "$work/notes/wal.txt"
echo "Readers take a snapshot from the wal-index; one writer at a time." > "$work/notes/locks.txt"

# --shared: its tools write $work itself (without it, a layer of their own over it)
lead=$(agent-fork -n "${LEAD:-files-lead}" -r lead --allow '*_file' --allow list_dir \
       --cwd "$work" --shared -m "$model" "Summarise the notes in notes/")
agent-run "$lead" >/dev/null                    # lists notes/, forks the reader
agent-ps -q --parent "$lead" | xargs -n 1 agent-run >/dev/null     # the reader reads
agent-run "$lead" >/dev/null                    # collects it, writes summary.md
echo "$work/summary.md:"
cat "$work/summary.md"
