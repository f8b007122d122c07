#!/bin/sh
# Copy-on-write workspaces: a lead over a directory, two workers forked from it
# edit the same file, each in a layer of its own; their diffs; the first merged
# into the lead, the second's conflict shown and settled; the directory itself
# changed only when the lead is merged. Offline (the scripted model); needs
# bubblewrap and a kernel that mounts overlayfs in a user namespace (Linux 5.11).
set -e
here=$(cd "$(dirname "$0")" && pwd)
model="scripted:$here/models/workspaces.jsonl"
run() { printf '\n$ %s\n' "$1"; eval "$1"; }
# Agents left by an earlier run.
agent-kill -s KILL --cascade ws-lead >/dev/null 2>&1 || true
agent-wait ws-w1 ws-w2 ws-lead >/dev/null 2>&1 || true
work=$(mktemp -d)
echo "Hello." > "$work/greeting.txt"
chmod -R a+rwX "$work"          # (as root, the tools run as nobody)

run 'agent-fork -n ws-lead -r lead --allow write_file --cwd "$work" -m "$model" >/dev/null'
run 'agent-fork -p ws-lead -n ws-w1 --allow write_file "Make the greeting formal" >/dev/null'
run 'agent-fork -p ws-lead -n ws-w2 --allow write_file "Make the greeting casual, add a farewell" >/dev/null'
run 'agent-run ws-w1 && agent-run ws-w2     # each writes greeting.txt, in its own layer'
run 'agent-diff ws-w1                       # what w1 changed since the fork'
run 'agent-diff --stat ws-w2'
run 'agent-merge ws-w1                      # into the lead'"'"'s layer'
run 'agent-merge ws-w2 || echo "(exit $?: a conflict, nothing merged)"'
run 'agent-merge --only farewell.txt ws-w2  # take the rest'
run 'cat "$work/greeting.txt"; ls "$work"   # the directory itself: unchanged'
run 'agent-ps -o name,changes | grep -e NAME -e ws-'
run 'agent-merge ws-lead && cat "$work/greeting.txt" "$work/farewell.txt"'
rm -rf "$work"
