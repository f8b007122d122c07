"""The schema's migrations from 0011 on, after those of store/migrate_early.py (whose
set they join): store/migrations.py tells the order. A migration once released is
never edited: change the schema by appending one here."""

from agentctl.store.migrate_early import MIGRATIONS, run as _run


@MIGRATIONS(name="0011_sandbox")
def sandbox(db):
    # The sandbox of an agent's tools (agentctl(7), SANDBOX): more paths they may read
    # (one a line), the network, the limits on each call (KEY=VALUE,...), and the
    # operator's grant of a tool's whole power.
    _run(db, """
    ALTER TABLE agents ADD COLUMN ro TEXT;
    ALTER TABLE agents ADD COLUMN net INTEGER;
    ALTER TABLE agents ADD COLUMN limits TEXT;
    ALTER TABLE agents ADD COLUMN unconfined INTEGER
    """)


@MIGRATIONS(name="0012_daily")
def daily(db):
    # An agent held after a failed turn until someone tries again (held_at), its model
    # options (KEY=VALUE, one a line) and the JSON Schema its final reply must fit;
    # agentctl(5), agents.
    _run(db, """
    ALTER TABLE agents ADD COLUMN held_at REAL;
    ALTER TABLE agents ADD COLUMN options TEXT;
    ALTER TABLE agents ADD COLUMN schema TEXT
    """)


@MIGRATIONS(name="0013_usage")
def usage(db):
    # What a model call cost (agentctl(7), COST): the prompt tokens the provider served
    # from its cache (read) and wrote to it, per turn and per agent; the money, in whole
    # millionths of a dollar (NULL: no call had a price), and the calls without a price;
    # and the unit of a budget account (NULL: tokens; usd: millionths of a dollar).
    _run(db, """
    ALTER TABLE agents ADD COLUMN budget_unit TEXT;
    ALTER TABLE agents ADD COLUMN tokens_cached INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN tokens_written INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN cost INTEGER;
    ALTER TABLE agents ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN cost INTEGER;
    ALTER TABLE turns ADD COLUMN unpriced INTEGER NOT NULL DEFAULT 0
    """)


@MIGRATIONS(name="0014_trace")
def trace(db):
    # The trace context an agent's turns continue (agent-run(1), TRACING): the W3C
    # traceparent of the span that forked it, or of its own first traced turn.
    _run(db, """
    ALTER TABLE agents ADD COLUMN trace TEXT
    """)


@MIGRATIONS(name="0015_endpoints")
def endpoints(db):
    # Many runners, one provider (agent-run(1), Providers): what every run that shares the
    # database knows of each endpoint (a base URL and a key's fingerprint, never the key),
    # and on each agent's row the endpoint its run calls, and since when it has a call in
    # flight there (a slot: it counts while the run's lease holds) or waits for one.
    _run(db, """
    CREATE TABLE endpoints (
        id            TEXT PRIMARY KEY,
        provider      TEXT NOT NULL,
        url           TEXT NOT NULL,
        not_before    REAL,
        reason        TEXT,
        refused_at    REAL,
        spacing       REAL,
        next_at       REAL,
        requests_left INTEGER,
        tokens_left   INTEGER,
        seen_at       REAL
    );
    ALTER TABLE agents ADD COLUMN endpoint TEXT REFERENCES endpoints(id);
    ALTER TABLE agents ADD COLUMN calling REAL;
    ALTER TABLE agents ADD COLUMN waiting REAL;
    CREATE INDEX agents_endpoint ON agents(endpoint) WHERE status = 'R'
    """)


@MIGRATIONS(name="0016_confine")
def confine(db):
    # Two grants of the sandbox (agentctl(7), SANDBOX), one name a line: the names of the
    # read-only set its tools may write (rw), the environment variables they get (env).
    _run(db, """
    ALTER TABLE agents ADD COLUMN rw TEXT;
    ALTER TABLE agents ADD COLUMN env TEXT
    """)


@MIGRATIONS(name="0017_held_for")
def held_for(db):
    # What a hold was for (agent-run(1), Failures): a fingerprint of what the environment
    # gave the agent's model when its turn failed for good (the model, its base URL, its
    # key's fingerprint), so that the next agent-run --all tries it again once that
    # changed; and an endpoint's cap on calls in flight as its runs last had it, so that
    # a reader sees a run waiting for a slot whatever its own environment says.
    _run(db, """
    ALTER TABLE agents ADD COLUMN held_for TEXT;
    ALTER TABLE endpoints ADD COLUMN cap INTEGER
    """)


@MIGRATIONS(name="0018_mail_loop")
def mail_loop(db):
    # Mail loops (agentctl(7), Lifecycle): the check of two agents that answer each
    # other's mail (mail_loop, N/DURATION or off; NULL: the default), and when the agent
    # was last held for a loop (looped_at: its count starts again after it).
    _run(db, """
    ALTER TABLE agents ADD COLUMN mail_loop TEXT;
    ALTER TABLE agents ADD COLUMN looped_at REAL
    """)


@MIGRATIONS(name="0019_net_hosts")
def net_hosts(db):
    # The network by allowlist (agentctl(7), NETWORK): net holds the hosts its tools may
    # reach, one pattern a line (agentctl.hosts), not a flag: what was yes is *, every
    # public host (the host's loopback and private networks now only by address). The
    # column is made again as TEXT (SQLite changes no column's type in place).
    _run(db, """
    ALTER TABLE agents ADD COLUMN net_hosts TEXT;
    UPDATE agents SET net_hosts = '*' WHERE net;
    ALTER TABLE agents DROP COLUMN net;
    ALTER TABLE agents RENAME COLUMN net_hosts TO net
    """)


@MIGRATIONS(name="0020_batch")
def batch(db):
    # Turns at batch prices (agentctl(7), TIERS): an agent's tier (standard, batch or
    # flex; NULL: standard), and each model call sent through a provider's batch API,
    # from queued to applied (agentctl(5), batched).
    _run(db, """
    ALTER TABLE agents ADD COLUMN tier TEXT;
    CREATE TABLE batched (
        id          TEXT PRIMARY KEY,
        agent_id    TEXT NOT NULL REFERENCES agents(id),
        turn_id     INTEGER NOT NULL REFERENCES turns(id),
        step        INTEGER NOT NULL,
        model       TEXT NOT NULL,
        endpoint    TEXT NOT NULL,
        url         TEXT NOT NULL,
        state       TEXT NOT NULL,
        body        TEXT,
        token       TEXT,
        batch       TEXT,
        status      TEXT,
        outcome     TEXT,
        result      TEXT,
        tries       INTEGER NOT NULL DEFAULT 0,
        created_at  REAL NOT NULL,
        sent_at     REAL,
        polled_at   REAL,
        ended_at    REAL
    );
    CREATE INDEX batched_turn ON batched(turn_id, step);
    CREATE INDEX batched_agent ON batched(agent_id, state);
    CREATE INDEX batched_state ON batched(state, batch)
    """)


@MIGRATIONS(name="0021_tool_run_task")
def tool_run_task(db):
    # A call of an MCP tool that its server made a task (agent-run(1), MCP servers): the
    # task, which the agent's next runs poll, kept with its run until it is done.
    _run(db, "ALTER TABLE tool_runs ADD COLUMN task TEXT")


@MIGRATIONS(name="0022_layers")
def layers(db):
    # Copy-on-write workspaces (agentctl(7), WORKSPACES): an agent's layer over its
    # working directory, a row each: whose it is, the layer under it (NULL: the real
    # directory, base), the host whose data directory holds it, and when it was frozen
    # (NULL: its agent still writes it; one such row an agent at most); and an agent's
    # shared, whose tools write its working directory itself (no layer): an agent made
    # before layers goes on as it was.
    _run(db, """
    ALTER TABLE agents ADD COLUMN shared INTEGER;
    UPDATE agents SET shared = 1 WHERE cwd IS NOT NULL;
    CREATE TABLE layers (
        id          INTEGER PRIMARY KEY,
        agent_id    TEXT NOT NULL REFERENCES agents(id),
        below       INTEGER REFERENCES layers(id),
        base        TEXT NOT NULL,
        host        TEXT NOT NULL,
        frozen_at   REAL,
        created_at  REAL NOT NULL
    );
    CREATE UNIQUE INDEX layers_own ON layers(agent_id) WHERE frozen_at IS NULL;
    CREATE INDEX layers_agent ON layers(agent_id, id)
    """)
