"""The schema's first migrations, 0001 to 0010 (what PostgreSQL's baseline holds,
store/pgschema.py), and the set they begin: store/migrations.py tells the order.
A migration once released is never edited."""

from sqlite_utils.migrations import Migrations

from agentctl import clock
from agentctl.ids import INIT_ID

MIGRATIONS = Migrations("agentctl")


def run(db, script):
    # Statement by statement: executescript() would commit the caller's transaction.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


@MIGRATIONS(name="0001_agents_messages_events")
def agents_messages_events(db):
    run(db, """
    CREATE TABLE agents (
        id            TEXT PRIMARY KEY,
        name          TEXT,
        parent_id     TEXT REFERENCES agents(id),
        forked_from   TEXT REFERENCES agents(id),
        fork_msg_id   INTEGER,
        role          TEXT NOT NULL DEFAULT 'agent',
        status        TEXT NOT NULL DEFAULT 'S',
        model         TEXT,
        system_prompt TEXT,
        created_at    REAL NOT NULL,
        exited_at     REAL,
        exit_code     INTEGER,
        exit_signal   TEXT,
        result        TEXT,
        pending_signal TEXT
    );
    CREATE UNIQUE INDEX agents_name_taken ON agents(name) WHERE status != 'X';
    CREATE INDEX agents_parent ON agents(parent_id);
    CREATE INDEX agents_status ON agents(status);
    CREATE INDEX agents_name ON agents(name);
    CREATE TABLE messages (
        id           INTEGER PRIMARY KEY,
        agent_id     TEXT NOT NULL REFERENCES agents(id),
        kind         TEXT NOT NULL,
        content      TEXT NOT NULL DEFAULT '',
        tool_name    TEXT,
        tool_call_id TEXT,
        turn_id      INTEGER,
        created_at   REAL NOT NULL
    );
    CREATE INDEX messages_agent ON messages(agent_id, id);
    CREATE INDEX messages_boundary ON messages(agent_id, id)
        WHERE kind IN ('clear', 'compaction');
    CREATE TABLE events (
        id         INTEGER PRIMARY KEY,
        agent_id   TEXT NOT NULL REFERENCES agents(id),
        kind       TEXT NOT NULL,
        detail     TEXT,
        actor_id   TEXT REFERENCES agents(id),
        created_at REAL NOT NULL
    );
    CREATE INDEX events_agent ON events(agent_id, id)
    """)
    # init: the root of every tree, like PID 1, with the nil UUID as its id.
    db.execute("INSERT INTO agents (id, name, role, status, created_at) "
               "VALUES (?, 'init', 'kernel', 'S', ?)", [INIT_ID, clock.now()])


@MIGRATIONS(name="0002_mail")
def mail(db):
    run(db, """
    CREATE TABLE mail (
        id           INTEGER PRIMARY KEY,
        sender_id    TEXT REFERENCES agents(id),
        recipient_id TEXT NOT NULL REFERENCES agents(id),
        kind         TEXT NOT NULL DEFAULT 'mail',
        body         TEXT NOT NULL,
        created_at   REAL NOT NULL,
        read_at      REAL,
        read_turn    INTEGER
    );
    CREATE INDEX mail_unread ON mail(recipient_id, id) WHERE read_at IS NULL;
    CREATE INDEX mail_recipient ON mail(recipient_id, id)
    """)


@MIGRATIONS(name="0003_turns")
def turns(db):
    run(db, """
    ALTER TABLE agents ADD COLUMN lease_owner TEXT;
    ALTER TABLE agents ADD COLUMN lease_until REAL;
    ALTER TABLE agents ADD COLUMN wake_at REAL;
    ALTER TABLE agents ADD COLUMN retry_at REAL;
    ALTER TABLE agents ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN tokens_in INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN tokens_out INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN hup_pending INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN void INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX messages_unanswered ON messages(agent_id)
        WHERE kind = 'user' AND turn_id IS NULL;
    CREATE INDEX messages_turn ON messages(turn_id) WHERE turn_id IS NOT NULL;
    CREATE INDEX agents_wake ON agents(wake_at) WHERE wake_at IS NOT NULL;
    CREATE TABLE turns (
        id            INTEGER PRIMARY KEY,
        agent_id      TEXT NOT NULL REFERENCES agents(id),
        status        TEXT NOT NULL DEFAULT 'running',
        model         TEXT,
        started_at    REAL NOT NULL,
        ended_at      REAL,
        first_msg_id  INTEGER,
        steps         INTEGER NOT NULL DEFAULT 0,
        input_tokens  INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        mail_read     INTEGER NOT NULL DEFAULT 0,
        error         TEXT
    );
    CREATE INDEX turns_agent ON turns(agent_id, id);
    CREATE INDEX turns_open ON turns(agent_id) WHERE status = 'running'
    """)


@MIGRATIONS(name="0004_long_lived")
def long_lived(db):
    # Compaction (context_window, keep_from, tokens), budgets (budget,
    # budget_id, spent), operator timers (mail.deliver_at) and documents.
    run(db, """
    ALTER TABLE agents ADD COLUMN context_window INTEGER;
    ALTER TABLE agents ADD COLUMN budget INTEGER;
    ALTER TABLE agents ADD COLUMN budget_id TEXT REFERENCES agents(id);
    ALTER TABLE agents ADD COLUMN spent INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN keep_from INTEGER;
    ALTER TABLE messages ADD COLUMN tokens INTEGER;
    ALTER TABLE mail ADD COLUMN deliver_at REAL;
    CREATE INDEX agents_budget ON agents(budget_id) WHERE budget_id IS NOT NULL;
    CREATE INDEX mail_deferred ON mail(deliver_at)
        WHERE deliver_at IS NOT NULL AND read_at IS NULL;
    CREATE TABLE documents (
        id         INTEGER PRIMARY KEY,
        name       TEXT NOT NULL,
        version    INTEGER NOT NULL,
        owner_id   TEXT REFERENCES agents(id),
        visibility TEXT NOT NULL DEFAULT 'private',
        body       TEXT,
        author_id  TEXT REFERENCES agents(id),
        created_at REAL NOT NULL,
        UNIQUE (name, version)
    );
    CREATE INDEX documents_owner ON documents(owner_id)
    """)


@MIGRATIONS(name="0005_turn_timer")
def turn_timer(db):
    # The timer a turn took, given back if the turn is voided.
    run(db, "ALTER TABLE turns ADD COLUMN woke_at REAL")


@MIGRATIONS(name="0006_lifecycle")
def lifecycle(db):
    # Supervision (restart policy, its intensity and period, the restarts made),
    # reaping, idle exit, the limits against runaway forking, and a grace period's
    # deadline (agentctl(7), LIFECYCLE). depth counts forks along forked_from.
    run(db, """
    ALTER TABLE agents ADD COLUMN restart TEXT;
    ALTER TABLE agents ADD COLUMN max_restarts INTEGER;
    ALTER TABLE agents ADD COLUMN restart_window REAL;
    ALTER TABLE agents ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN window_start REAL;
    ALTER TABLE agents ADD COLUMN window_restarts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN reap_after REAL;
    ALTER TABLE agents ADD COLUMN idle_exit REAL;
    ALTER TABLE agents ADD COLUMN max_children INTEGER;
    ALTER TABLE agents ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN kill_at REAL;
    ALTER TABLE agents ADD COLUMN last_failure TEXT;
    CREATE INDEX agents_kill_at ON agents(kill_at) WHERE kill_at IS NOT NULL;
    CREATE INDEX agents_zombies ON agents(exited_at) WHERE status = 'Z';
    CREATE INDEX agents_idle ON agents(idle_exit) WHERE idle_exit IS NOT NULL
    """)
    db.execute("""
    WITH RECURSIVE line(id, depth) AS (
        SELECT id, 0 FROM agents WHERE forked_from IS NULL
        UNION ALL
        SELECT a.id, line.depth + 1 FROM agents a JOIN line ON a.forked_from = line.id)
    UPDATE agents SET depth = (SELECT depth FROM line WHERE line.id = agents.id)
    """)


@MIGRATIONS(name="0007_stop_reason")
def stop_reason(db):
    # Why the model stopped its last reply of the turn, when that was the token limit.
    run(db, "ALTER TABLE turns ADD COLUMN stop_reason TEXT")


@MIGRATIONS(name="0008_event_log")
def event_log(db):
    # The event log (agent-log): sequence numbers that are never reused, even after
    # agent-log --prune-before (AUTOINCREMENT, which a column can't be given in
    # place: the table is made again, every row moved with its id), and a JSON payload.
    run(db, """
    CREATE TABLE events_log (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id   TEXT NOT NULL REFERENCES agents(id),
        kind       TEXT NOT NULL,
        detail     TEXT,
        actor_id   TEXT REFERENCES agents(id),
        created_at REAL NOT NULL,
        data       TEXT
    );
    INSERT INTO events_log (id, agent_id, kind, detail, actor_id, created_at)
        SELECT id, agent_id, kind, detail, actor_id, created_at FROM events ORDER BY id;
    DROP TABLE events;
    ALTER TABLE events_log RENAME TO events;
    CREATE INDEX events_agent ON events(agent_id, id);
    CREATE INDEX events_time ON events(created_at)
    """)


@MIGRATIONS(name="0009_tools")
def tools(db):
    # External tools (agentctl(7), TOOLS): what an agent is granted (allow), what needs
    # approval (ask), its working directory; and each external call's run, recorded as
    # started before the program runs, so that a crash never runs it twice.
    run(db, """
    ALTER TABLE agents ADD COLUMN allow TEXT;
    ALTER TABLE agents ADD COLUMN ask TEXT;
    ALTER TABLE agents ADD COLUMN cwd TEXT;
    CREATE TABLE tool_runs (
        id            INTEGER PRIMARY KEY,
        agent_id      TEXT NOT NULL REFERENCES agents(id),
        turn_id       INTEGER NOT NULL REFERENCES turns(id),
        tool_call_id  TEXT NOT NULL,
        tool          TEXT NOT NULL,
        host          TEXT,
        pgid          INTEGER,
        started_at    REAL NOT NULL,
        ended_at      REAL,
        outcome       TEXT
    );
    CREATE INDEX tool_runs_call ON tool_runs(turn_id, tool_call_id)
    """)


@MIGRATIONS(name="0010_requests")
def requests(db):
    # Pause for a human (agentctl(7), REQUESTS): a question (the ask tool) or a tool
    # call that needs approval (agent-fork --ask), asked by a paused agent (status P)
    # and decided once, by the operator or an ancestor.
    run(db, """
    CREATE TABLE requests (
        id            TEXT PRIMARY KEY,
        agent_id      TEXT NOT NULL REFERENCES agents(id),
        turn_id       INTEGER NOT NULL REFERENCES turns(id),
        tool_call_id  TEXT NOT NULL,
        kind          TEXT NOT NULL,
        question      TEXT,
        tool          TEXT,
        arguments     TEXT,
        created_at    REAL NOT NULL,
        deadline      REAL,
        decided_at    REAL,
        decision      TEXT,
        answer        TEXT,
        decided_by    TEXT REFERENCES agents(id)
    );
    CREATE INDEX requests_pending ON requests(agent_id) WHERE decision IS NULL;
    CREATE INDEX requests_call ON requests(turn_id, tool_call_id);
    CREATE INDEX requests_deadline ON requests(deadline) WHERE decision IS NULL
    """)
