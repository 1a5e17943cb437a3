-- The fire ledger: polls (run), fires, and the occurrences once_per_n counts.

CREATE TABLE run (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id  TEXT NOT NULL REFERENCES workspace (id),
    trigger_name  TEXT NOT NULL,
    worker        TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    window_since  TEXT NOT NULL,
    window_until  TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'skipped', 'stale')),
    matched       INTEGER NOT NULL DEFAULT 0,
    fired         INTEGER NOT NULL DEFAULT 0,
    already       INTEGER NOT NULL DEFAULT 0,
    null_clocks   INTEGER NOT NULL DEFAULT 0,
    null_keys     INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    started_at    TEXT NOT NULL,
    finished_at   TEXT
);

CREATE INDEX run_trigger ON run (workspace_id, trigger_name, id);

CREATE TABLE fire (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    rule_name    TEXT NOT NULL,
    mode         TEXT NOT NULL CHECK (mode IN ('shadow', 'live')),
    dedup_key    TEXT NOT NULL,
    dedup_bucket TEXT NOT NULL,
    trigger_name TEXT NOT NULL,
    clock        TEXT NOT NULL,
    row_json     TEXT NOT NULL,
    run_id       INTEGER,
    fired_at     TEXT NOT NULL,
    UNIQUE (workspace_id, rule_name, mode, dedup_key, dedup_bucket)
);

CREATE TABLE occurrence (
    workspace_id  TEXT NOT NULL REFERENCES workspace (id),
    rule_name     TEXT NOT NULL,
    mode          TEXT NOT NULL,
    dedup_key     TEXT NOT NULL,
    occurrence_id TEXT NOT NULL,
    PRIMARY KEY (workspace_id, rule_name, mode, dedup_key, occurrence_id)
);

CREATE TABLE occurrence_count (
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    rule_name    TEXT NOT NULL,
    mode         TEXT NOT NULL,
    dedup_key    TEXT NOT NULL,
    count        INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, rule_name, mode, dedup_key)
);
