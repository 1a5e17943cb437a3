-- Rowfire's control plane on SQLite (times as fixed-width RFC 3339 UTC text): workspaces, definition versions, trigger and rule state.
-- Every table carries workspace_id and it leads every unique key.

CREATE TABLE workspace (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    timezone      TEXT NOT NULL DEFAULT 'UTC',
    halted_reason TEXT,
    halted_at     TEXT,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

INSERT INTO workspace (id, name) VALUES ('default', 'Default workspace');

CREATE TABLE definition_version (
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    version      INTEGER NOT NULL,
    document     TEXT NOT NULL,
    checksum     TEXT NOT NULL,
    pushed_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, version)
);

CREATE TABLE trigger_state (
    workspace_id     TEXT NOT NULL REFERENCES workspace (id),
    trigger_name     TEXT NOT NULL,
    source_name      TEXT NOT NULL,
    checksum         TEXT NOT NULL,
    watermark        TEXT NOT NULL,
    origin           TEXT NOT NULL,
    lookback_ms      INTEGER NOT NULL,
    poll_interval_ms INTEGER NOT NULL,
    next_poll_at     TEXT NOT NULL,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    fencing_token    INTEGER NOT NULL DEFAULT 0,
    last_polled_at   TEXT,
    last_error       TEXT,
    removed_at       TEXT,
    PRIMARY KEY (workspace_id, trigger_name)
);

CREATE INDEX trigger_state_due ON trigger_state (next_poll_at) WHERE removed_at IS NULL;

CREATE TABLE rule_state (
    workspace_id    TEXT NOT NULL REFERENCES workspace (id),
    rule_name       TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    checksum        TEXT NOT NULL,
    mode            TEXT NOT NULL CHECK (mode IN ('shadow', 'live')),
    mode_changed_at TEXT NOT NULL,
    tombstoned_at   TEXT,
    PRIMARY KEY (workspace_id, rule_name)
);
