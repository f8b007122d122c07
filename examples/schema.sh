#!/bin/sh
# Results as data: a task whose final reply must be a JSON value that fits a JSON
# Schema (agent-fork --schema), handed to jq. A reply that does not fit is a failed
# step the model is told about; here the scripted model's first answer is prose, its
# second the value. Offline; uses $AGENTCTL_DB (or the default database); needs jq.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-scripted:$here/models/triage.jsonl}
schema='{"type": "object", "additionalProperties": false,
         "required": ["severity", "files"],
         "properties": {"severity": {"enum": ["low", "high"]},
                        "files": {"type": "array", "items": {"type": "string"}}}}'

task=$(agent-fork -r task -m "$model" --schema "$schema" \
       "Triage: the nightly build fails in src/db.c and src/wal.c")
agent-run --format json "$task" | jq -r '.value.files[]'        # one file a line
severity=$(agent-wait --format json "$task" | jq -r '.[0].value.severity')
echo "severity: $severity"
