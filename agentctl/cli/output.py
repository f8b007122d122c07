"""One rendering path for every listing program (agentctl(7), OUTPUT).

A listing is rows (dicts) and columns. The table is for people and may
change; tsv, json and jsonl are for programs: keys are the lower-case column
names and, once released, keep their meaning. -q prints ids, -0 ends records
with NUL.
"""

import sys

from agentctl import jsonin
from agentctl.errors import UsageError

FORMATS = ("table", "tsv", "json", "jsonl")


class Column:
    """A column of a listing: `human` (row -> str) for the table, by default the
    value; `machine` (row -> JSON value) for the machine formats, by default row[key]."""

    __slots__ = ("key", "header", "human", "machine")

    def __init__(self, key, header, human=None, machine=None):
        self.key, self.header, self.human, self.machine = key, header, human, machine

    def value(self, row):
        return self.machine(row) if self.machine else row.get(self.key)

    def text(self, row):
        if self.human:
            return self.human(row)
        value = self.value(row)
        return "-" if value is None else str(value)


def pick(columns, spec, default):
    """Columns named by -o (comma-separated, any case), else the default ones."""
    by_key = {c.key: c for c in columns}
    keys = default if spec is None else [k.strip().lower() for k in spec.split(",") if k.strip()]
    if not keys:
        raise UsageError(f"no columns in -o {spec!r} (one or more of {', '.join(by_key)})")
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        raise UsageError(f"unknown column: {unknown[0]} (one of {', '.join(by_key)})")
    return [by_key[k] for k in keys]


TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"})
# In the table, what a terminal would act on (ESC, BEL, C1 codes: a title set,
# a screen cleared by a mail's subject) shows as ?, as ls and ps do.
UNPRINTABLE = {c: "?" for c in (*range(32), 127, *range(0x80, 0xa0))}


def _tsv_field(value):
    if value is None:
        return ""
    if isinstance(value, bool):         # as in JSON: a script tests `= true`
        return "true" if value else "false"
    if isinstance(value, (dict, list)):     # (agent-log's data) as JSON
        value = jsonin.dumps(value)
    return str(value).translate(TSV_ESCAPES)


def render(rows, columns, *, fmt="table", quiet=False, null=False, no_headers=False,
           out=None):
    out = out or sys.stdout
    if fmt not in FORMATS:
        raise UsageError(f"unknown format: {fmt} (one of {', '.join(FORMATS)})")
    end = "\0" if null else "\n"
    if quiet or (null and fmt in ("table", "json")):
        out.write("".join(f"{row['id']}{end}" for row in rows))
        return
    if fmt == "tsv":
        lines = [] if no_headers else ["\t".join(c.key for c in columns)]
        lines += ["\t".join(_tsv_field(c.value(row)) for c in columns) for row in rows]
        out.write("".join(line + end for line in lines))
        return
    if fmt in ("json", "jsonl"):
        objects = [{c.key: c.value(row) for c in columns} for row in rows]
        if fmt == "json":
            out.write(jsonin.dumps(objects, indent=2) + "\n")
        else:
            out.write("".join(jsonin.dumps(o) + end for o in objects))
        return
    if not rows:
        return
    table = [[c.text(row).translate(UNPRINTABLE) for c in columns] for row in rows]
    out.write(plain_table(table, () if no_headers else [c.header for c in columns]) + "\n")


def plain_table(rows, headers=()):
    """Columns left-aligned, two spaces apart, each line's end trimmed: tabulate's
    "plain" format, byte for byte (a test holds them equal), without the cost of
    importing tabulate (about 28 ms: it loads importlib.metadata) in every agent-ps."""
    count = len(headers) if headers else len(rows[0])
    widths = [max([len(headers[i]) + 2 if headers else 0] + [len(r[i]) for r in rows])
              for i in range(count)]
    lines = [headers] if headers else []
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in lines + rows)
