"""The versioned schema of heron's stores, for both back ends: one list of migrations each.

Each database records the versions applied to it in `schema_migrations` (version, name, time);
`heron db migrate` applies the missing ones in order, `heron db status` lists both. A migration
is never edited once released: a change of schema is a new version at the end of its list.

SQLite (the embedded, one-process back end): version 1 is the baseline — the SQLite stores
create their own tables when they open (`CREATE TABLE IF NOT EXISTS`), so an existing state
directory is at version 1 as it stands. PostgreSQL (several workers): the schema is created
only by migrations, never by a store opening, so workers of different versions cannot race to
change it; a store refuses a database that lacks a version (`heron._support.postgres`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    """One schema version of one back end."""

    version: int
    name: str
    script: str
    """The SQL statements that take the schema from the previous version to this one."""


SQLITE: tuple[Migration, ...] = (
    Migration(version=1, name="baseline: the tables the stores create", script=""),
)
"""The SQLite schema versions (see the module docstring)."""

_PG_1 = """
CREATE TABLE session_entries (
    entry_id  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session   TEXT NOT NULL,
    parent_id BIGINT,
    ts        DOUBLE PRECISION NOT NULL,
    role      TEXT NOT NULL,
    message   TEXT NOT NULL
);
CREATE INDEX session_entries_by_session ON session_entries (session, entry_id);
-- One row per session: its head, locked (FOR UPDATE) by every append, so the head check and
-- the write are one step whichever worker writes.
CREATE TABLE session_heads (
    session TEXT PRIMARY KEY,
    head    BIGINT NOT NULL
);
-- Ownership: one worker holds a session's lease; the epoch (fencing token) grows with every
-- new owner and every write of the session checks it.
CREATE TABLE session_leases (
    session    TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE bus_events (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          TEXT NOT NULL UNIQUE,
    session     TEXT NOT NULL,
    idem_key    TEXT,
    ts          DOUBLE PRECISION NOT NULL,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    consumed_at DOUBLE PRECISION,
    entry_id    BIGINT,
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT,
    dead_at     DOUBLE PRECISION
);
CREATE UNIQUE INDEX bus_events_idem ON bus_events (session, idem_key)
    WHERE idem_key IS NOT NULL;
CREATE INDEX bus_events_by_key ON bus_events (idem_key) WHERE idem_key IS NOT NULL;
-- The queue: only unconsumed, living events, in timeline order.
CREATE INDEX bus_events_pending ON bus_events (session, ts, seq)
    WHERE consumed_at IS NULL AND dead_at IS NULL;
"""

_PG_2 = """
CREATE TABLE jobs (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id               TEXT PRIMARY KEY,
    session          TEXT NOT NULL,
    call_id          TEXT,
    command          TEXT NOT NULL,
    cwd              TEXT NOT NULL,
    dir              TEXT NOT NULL,
    state            TEXT NOT NULL,
    supervisor_pid   INTEGER,
    supervisor_start BIGINT,
    child_pid        INTEGER,
    child_start      BIGINT,
    boot_id          TEXT NOT NULL DEFAULT '',
    cgroup           TEXT,
    started_at       DOUBLE PRECISION NOT NULL,
    timeout_s        DOUBLE PRECISION,
    deadline         DOUBLE PRECISION,
    ended_at         DOUBLE PRECISION,
    exit_code        INTEGER,
    signal           INTEGER,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    timed_out        BOOLEAN NOT NULL DEFAULT FALSE,
    reported         BOOLEAN NOT NULL DEFAULT FALSE,
    detail           TEXT
);
CREATE INDEX jobs_by_session ON jobs (session, started_at);
CREATE TABLE timers (
    id         TEXT PRIMARY KEY,
    session    TEXT NOT NULL,
    call_id    TEXT,
    message    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    every_s    DOUBLE PRECISION,
    cron       TEXT,
    tz         TEXT NOT NULL,
    misfire    TEXT NOT NULL,
    next_fire  DOUBLE PRECISION,
    fires      INTEGER NOT NULL,
    missed     INTEGER NOT NULL,
    state      TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    last_fired DOUBLE PRECISION
);
CREATE INDEX timers_due ON timers (session, state, next_fire);
CREATE TABLE job_monitors (
    seq                BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id                 TEXT PRIMARY KEY,
    job_id             TEXT NOT NULL,
    session            TEXT NOT NULL,
    call_id            TEXT,
    pattern            TEXT,
    coalesce_s         DOUBLE PRECISION NOT NULL,
    max_events_per_min INTEGER NOT NULL,
    "offset"           BIGINT NOT NULL,
    state              TEXT NOT NULL,
    created_at         DOUBLE PRECISION NOT NULL
);
CREATE TABLE subscriptions (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id         TEXT PRIMARY KEY,
    session    TEXT NOT NULL,
    source     TEXT NOT NULL,
    filter     TEXT NOT NULL,
    note       TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
"""

_PG_3 = """
CREATE TABLE idempotency_keys (
    tool             TEXT NOT NULL,
    key              TEXT NOT NULL,
    arguments_sha256 TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('running', 'done')),
    result           TEXT,
    created          DOUBLE PRECISION NOT NULL,
    expires          DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tool, key)
);
CREATE TABLE confirmation_tokens_used (
    nonce   TEXT PRIMARY KEY,
    tool    TEXT NOT NULL,
    expires DOUBLE PRECISION NOT NULL
);
CREATE TABLE artifacts (
    id         TEXT PRIMARY KEY,
    sha256     TEXT NOT NULL,
    tool       TEXT NOT NULL,
    call_id    TEXT NOT NULL,
    size       BIGINT NOT NULL,
    lines      BIGINT NOT NULL,
    created    DOUBLE PRECISION NOT NULL,
    expires    DOUBLE PRECISION NOT NULL,
    line_index BYTEA NOT NULL
);
CREATE INDEX artifacts_by_expiry ON artifacts (expires);
CREATE INDEX artifacts_by_sha256 ON artifacts (sha256);
CREATE TABLE serve_sessions (
    host        TEXT NOT NULL,
    session     TEXT NOT NULL,
    first_seen  DOUBLE PRECISION NOT NULL,
    last_active DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (host, session)
);
"""

_PG_4 = """
CREATE TABLE mail_threads (
    message_id  TEXT PRIMARY KEY,
    session     TEXT NOT NULL,
    recorded_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE approval_audit (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    timestamp         TEXT NOT NULL,
    tool              TEXT NOT NULL,
    arguments_summary TEXT NOT NULL,
    decision          TEXT NOT NULL,
    decided_by        TEXT NOT NULL,
    request_id        TEXT NOT NULL,
    turn_id           TEXT,
    session_id        TEXT,
    reason            TEXT,
    risk              TEXT
);
CREATE INDEX approval_audit_tool ON approval_audit (tool, id);
CREATE TABLE tool_executions (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started      DOUBLE PRECISION NOT NULL,
    ended        DOUBLE PRECISION,
    tool         TEXT NOT NULL,
    call_id      TEXT NOT NULL,
    session      TEXT,
    turn_id      TEXT NOT NULL,
    agent        TEXT,
    parent_agent TEXT,
    channel      TEXT,
    operator     TEXT,
    approved_by  TEXT,
    owner        TEXT NOT NULL,
    why          TEXT,
    arguments    TEXT NOT NULL,
    status       TEXT NOT NULL,
    success      BOOLEAN,
    duration_ms  DOUBLE PRECISION,
    result       TEXT,
    risk         TEXT
);
CREATE INDEX tool_executions_by_tool ON tool_executions (tool, id);
CREATE INDEX tool_executions_by_session ON tool_executions (session, id);
CREATE INDEX tool_executions_by_start ON tool_executions (started);
"""

_PG_5 = """
CREATE TABLE human_requests (
    seq               BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL,
    session           TEXT NOT NULL,
    call_ids          TEXT NOT NULL,
    tool              TEXT NOT NULL,
    arguments         TEXT NOT NULL,
    display_arguments TEXT NOT NULL,
    digest            TEXT NOT NULL,
    question          TEXT NOT NULL,
    options           TEXT NOT NULL,
    schema            TEXT,
    urgency           TEXT NOT NULL,
    risk              TEXT,
    approvers         TEXT NOT NULL,
    created_at        DOUBLE PRECISION NOT NULL,
    deadline          DOUBLE PRECISION,
    on_timeout        TEXT NOT NULL,
    default_value     TEXT,
    remind_every_s    DOUBLE PRECISION,
    reminders         INTEGER NOT NULL DEFAULT 0,
    status            TEXT NOT NULL,
    outcome           TEXT,
    decision          TEXT,
    answer            TEXT,
    answered_by       TEXT,
    answered_at       DOUBLE PRECISION,
    reason            TEXT,
    signature         TEXT,
    deliveries        TEXT NOT NULL DEFAULT '{}',
    gates_call        INTEGER NOT NULL DEFAULT 0,
    reported          INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX human_requests_active ON human_requests (status, deadline);
CREATE INDEX human_requests_identical ON human_requests (session, tool, digest);
CREATE INDEX human_requests_unreported ON human_requests (reported, session);
CREATE TABLE approval_rules (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id             TEXT PRIMARY KEY,
    tool           TEXT NOT NULL,
    scope          TEXT NOT NULL,
    session        TEXT,
    command_prefix TEXT,
    created_at     DOUBLE PRECISION NOT NULL,
    expires_at     DOUBLE PRECISION NOT NULL,
    created_by     TEXT NOT NULL,
    request_id     TEXT,
    revoked_at     DOUBLE PRECISION
);
"""

_PG_6 = """
CREATE TABLE shell_history (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         TEXT NOT NULL,
    agent      TEXT,
    command    TEXT NOT NULL,
    cwd        TEXT NOT NULL,
    outcome    TEXT NOT NULL,
    risk       TEXT NOT NULL,
    exit_code  INTEGER,
    duration_s DOUBLE PRECISION,
    timed_out  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE TABLE mcp_server_pins (
    server          TEXT PRIMARY KEY,
    launch          TEXT NOT NULL,
    package_version TEXT NOT NULL,
    server_version  TEXT NOT NULL,
    digest          TEXT NOT NULL,
    definitions     TEXT NOT NULL,
    approved_at     DOUBLE PRECISION NOT NULL
);
"""

_PG_7 = """
CREATE TABLE subagents (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id               TEXT PRIMARY KEY,
    agent            TEXT NOT NULL,
    task             TEXT NOT NULL,
    mode             TEXT NOT NULL,
    parent           TEXT,
    root_session     TEXT NOT NULL,
    parent_session   TEXT NOT NULL,
    call_id          TEXT NOT NULL,
    depth            INTEGER NOT NULL,
    status           TEXT NOT NULL,
    outcome          TEXT,
    result           TEXT NOT NULL,
    error            TEXT NOT NULL,
    usage            TEXT NOT NULL,
    budget           TEXT NOT NULL,
    created_at       DOUBLE PRECISION NOT NULL,
    ended_at         DOUBLE PRECISION,
    delivered        INTEGER NOT NULL,
    -- Who runs the child: on a shared store the epoch of its root session's lease at spawn.
    owner            BIGINT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX subagents_root ON subagents (root_session, status);
-- The poller's question on a shared store: which timers fell due (a dead worker's among them).
CREATE INDEX timers_next_fire ON timers (next_fire) WHERE state = 'active';
"""

_PG_8 = """
CREATE TABLE gateway_turn_events (
    seq     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session TEXT NOT NULL,
    type    TEXT NOT NULL,
    body    TEXT NOT NULL,
    at      DOUBLE PRECISION NOT NULL
);
CREATE INDEX gateway_turn_events_session ON gateway_turn_events (session, seq);
-- The epoch of the event streams' ids: one per database, so a cursor names this database.
CREATE TABLE gateway_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO gateway_meta (key, value) VALUES ('epoch', substr(md5(random()::text), 1, 12));
"""

_PG_9 = """
CREATE TABLE messages (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id           TEXT PRIMARY KEY,
    thread       TEXT NOT NULL,
    session      TEXT,
    kind         TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    text         TEXT NOT NULL,
    card         TEXT,
    attachments  TEXT NOT NULL,
    urgency      TEXT NOT NULL,
    sender       TEXT NOT NULL,
    created      DOUBLE PRECISION NOT NULL,
    read_at      DOUBLE PRECISION,
    read_via     TEXT,
    answered_at  DOUBLE PRECISION,
    answered_via TEXT,
    due_at       DOUBLE PRECISION,
    pending      TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX messages_thread ON messages (thread, created);
CREATE INDEX messages_due ON messages (due_at) WHERE due_at IS NOT NULL;
CREATE TABLE message_deliveries (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id TEXT NOT NULL REFERENCES messages (id),
    channel    TEXT NOT NULL,
    outcome    TEXT NOT NULL,
    at         DOUBLE PRECISION NOT NULL,
    ref        TEXT
);
CREATE INDEX message_deliveries_of ON message_deliveries (message_id, seq);
CREATE INDEX message_deliveries_ref ON message_deliveries (ref) WHERE ref IS NOT NULL;
-- An artifact's content once per digest, in chunks (a page reads only the chunks it needs).
CREATE TABLE artifact_chunks (
    sha256 TEXT NOT NULL,
    n      INTEGER NOT NULL,
    data   BYTEA NOT NULL,
    PRIMARY KEY (sha256, n)
);
-- The signing keys every worker shares: receipts, decisions, message tokens (`kind`).
CREATE TABLE signing_keys (
    kind       TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    secret     BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (kind, key_id)
);
-- The workspace each session last ran in (a move to another one is told to the model).
CREATE TABLE session_workspaces (
    session   TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    host      TEXT NOT NULL,
    path      TEXT NOT NULL,
    bound_at  DOUBLE PRECISION NOT NULL
);
-- One MCP server's OAuth record (encrypted envelope); `version` grows with every write and a
-- refresh is claimed (`refresh_owner` until `refresh_until`) so one worker rotates at a time.
CREATE TABLE mcp_oauth_records (
    server        TEXT PRIMARY KEY,
    envelope      TEXT NOT NULL,
    version       BIGINT NOT NULL,
    updated_at    DOUBLE PRECISION NOT NULL,
    refresh_owner TEXT,
    refresh_until DOUBLE PRECISION
);
"""

_PG_10 = """
-- Derived: an entry's tokens as one counter counts them, by the entry's position in its
-- session (`heron.sessions.store.TokenCounts`), apart from the entries so that reading them
-- does not read the messages. Entries stored before this version get theirs from the first
-- resume that counts them (counting needs the counter, which SQL does not have).
CREATE TABLE session_entry_tokens (
    session    TEXT NOT NULL,
    counted_by TEXT NOT NULL,
    position   INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    PRIMARY KEY (session, counted_by, position)
);
"""

POSTGRESQL: tuple[Migration, ...] = (
    Migration(version=1, name="sessions, leases and the event bus", script=_PG_1),
    Migration(version=2, name="jobs, timers, job monitors, subscriptions", script=_PG_2),
    Migration(
        version=3,
        name="idempotency keys, confirmation tokens, artifacts, the host index",
        script=_PG_3,
    ),
    Migration(version=4, name="mail threads, the approval and execution audits", script=_PG_4),
    Migration(version=5, name="requests to a human and always rules", script=_PG_5),
    Migration(version=6, name="shell history, MCP server pins", script=_PG_6),
    Migration(version=7, name="sub-agent tasks, timers by their next fire", script=_PG_7),
    Migration(version=8, name="the gateway's turn log", script=_PG_8),
    Migration(
        version=9,
        name="messages, artifact contents, signing keys, MCP OAuth records, workspaces",
        script=_PG_9,
    ),
    Migration(version=10, name="the session entries' token counts", script=_PG_10),
)
"""The PostgreSQL schema versions (see the module docstring)."""


def latest(migrations: tuple[Migration, ...]) -> int:
    """The newest version of a back end's list."""
    return max(m.version for m in migrations)
