"""One rendering path for every listing program (agentctl(7), OUTPUT).

A listing is rows (dicts, or a Table held column by column) and columns. The table is for people and may
change; tsv, json and jsonl are for programs: keys are the lower-case column
names and, once released, keep their meaning. -q prints ids, -0 ends records
with NUL.
"""

import sys
from itertools import repeat

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

    def values(self, rows):
        """Every row's value, in order."""
        return [self.value(row) for row in rows]

    def texts(self, rows):
        return [self.text(row) for row in rows]


class Table:
    """Rows held column by column, for a listing of 100,000 (agent-ps): table[key] is
    every row's value of `key` in order (None in a row without it), read once when first
    asked. `rows` are tuples of `fields`, or dicts when no `fields` are given; `made`
    ({key: table -> column}) makes the columns that no row holds from others."""

    def __init__(self, rows, fields=None, made=None):
        self.rows, self.made, self.columns = rows, made or {}, {}
        self.index = None if fields is None else {f: i for i, f in enumerate(fields)}

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, key):
        if key not in self.columns:
            self.columns[key] = self._read(key)
        return self.columns[key]

    def _read(self, key):
        if key in self.made:
            return self.made[key](self)
        if self.index is None:
            return [row.get(key) for row in self.rows]
        if key not in self.index:
            return [None] * len(self.rows)
        i = self.index[key]
        return [row[i] for row in self.rows]


class Whole(Column):
    """A column of a Table, made whole: `human` (table -> its texts) and `machine`
    (table -> its values) read the table's columns, not row after row; by default its
    values are table[key]."""

    __slots__ = ()

    def values(self, table):
        return self.machine(table) if self.machine else table[self.key]

    def texts(self, table):
        if self.human:
            return self.human(table)
        return ["-" if value is None else str(value) for value in self.values(table)]

    def reads(self, made=None):
        """The keys of the Table it reads (through those of `made`, {key: each}), or None
        when a human or machine that is not an `each` hides them."""
        keys = set()
        for part in (self.machine, self.human) if self.human else (self.machine,):
            if part is None:
                keys.add(self.key)
            elif isinstance(part, each):
                keys.update(part.keys)
            else:
                return None
        read = set()
        for key in keys:
            maker = (made or {}).get(key)
            if maker is not None and not isinstance(maker, each):
                return None
            read.update(maker.keys if maker is not None else (key,))
        return read


class each:
    """A Whole column's human or machine (or a Table's made column): `function` of each
    row's `keys`; without a function, the one key's values as they are. Its `keys` say
    what it reads (Whole.reads)."""

    __slots__ = ("function", "keys")

    def __init__(self, function, *keys):
        self.function, self.keys = function, keys

    def __call__(self, table):
        if self.function is None:
            return table[self.keys[0]]
        return list(map(self.function, *(table[key] for key in self.keys)))


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
    """Write `rows` (dicts, or a Table whose columns are Whole) in `fmt`."""
    out = out or sys.stdout
    if fmt not in FORMATS:
        raise UsageError(f"unknown format: {fmt} (one of {', '.join(FORMATS)})")
    end = "\0" if null else "\n"
    if ids_only(fmt, quiet, null):
        ids = rows["id"] if isinstance(rows, Table) else [row["id"] for row in rows]
        out.write("".join(f"{i}{end}" for i in ids))
        return
    if fmt == "tsv":
        fields = [list(map(_tsv_field, c.values(rows))) for c in columns]
        lines = [] if no_headers else ["\t".join(c.key for c in columns)]
        lines += map("\t".join, zip(*fields))
        out.write("".join(line + end for line in lines))
        return
    if fmt in ("json", "jsonl"):
        objects = _objects(rows, columns)
        if fmt == "json":
            out.write(jsonin.dumps(objects, indent=2) + "\n")
        else:
            out.write("".join(jsonin.dumps(o) + end for o in objects))
        return
    if not rows:
        return
    cells = [shown_column(c.texts(rows)) for c in columns]
    out.write(plain_columns(cells, () if no_headers else [c.header for c in columns]) + "\n")


def ids_only(fmt, quiet, null):
    """Whether render() writes the rows' ids alone: -q, or -0 in a format that has no
    records of its own."""
    return quiet or (null and fmt in ("table", "json"))


def _objects(rows, columns):
    """Each row as a JSON object: a dict of each made as it is read (the quickest from a
    dict), or of a Table from its columns."""
    if not isinstance(rows, Table):
        return [{c.key: c.value(row) for c in columns} for row in rows]
    values = zip(*(c.values(rows) for c in columns))
    return list(map(dict, map(zip, repeat([c.key for c in columns]), values)))


def shown_column(texts):
    """A column's texts with what a terminal would act on as ? (UNPRINTABLE): as they are
    when all are printable (no translate of each of 100,000)."""
    return texts if "".join(texts).isprintable() else [t.translate(UNPRINTABLE) for t in texts]


def plain_table(rows, headers=()):
    """Columns left-aligned, two spaces apart, each line's end trimmed: tabulate's
    "plain" format, byte for byte (a test holds them equal), without the cost of
    importing tabulate (about 28 ms: it loads importlib.metadata) in every agent-ps."""
    count = len(headers) if headers else len(rows[0])
    return plain_columns([[row[i] for row in rows] for i in range(count)], headers)


def plain_columns(columns, headers=()):
    """plain_table() of cells given column by column."""
    widths = [max(len(headers[i]) + 2 if headers else 0, max(map(len, column), default=0))
              for i, column in enumerate(columns)]
    line = "  ".join(f"%-{width}s" for width in widths)     # each cell padded to its width
    lines = [(line % tuple(headers)).rstrip()] if headers else []
    lines += [(line % cells).rstrip() for cells in zip(*columns)]
    return "\n".join(lines)
