-- Rowfire's control plane on PostgreSQL: workspaces, definition versions, trigger and rule state.
-- Every table carries workspace_id and it leads every unique key.

CREATE TABLE workspace (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    timezone      TEXT NOT NULL DEFAULT 'UTC',
    halted_reason TEXT,
    halted_at     TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO workspace (id, name) VALUES ('default', 'Default workspace');

CREATE TABLE definition_version (
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    version      BIGINT NOT NULL,
    document     TEXT NOT NULL,
    checksum     TEXT NOT NULL,
    pushed_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (workspace_id, version)
);

CREATE TABLE trigger_state (
    workspace_id     TEXT NOT NULL REFERENCES workspace (id),
    trigger_name     TEXT NOT NULL,
    source_name      TEXT NOT NULL,
    checksum         TEXT NOT NULL,
    watermark        TIMESTAMPTZ NOT NULL,
    origin           TIMESTAMPTZ NOT NULL,
    lookback_ms      BIGINT NOT NULL,
    poll_interval_ms BIGINT NOT NULL,
    next_poll_at     TIMESTAMPTZ NOT NULL,
    lease_owner      TEXT,
    lease_expires_at TIMESTAMPTZ,
    fencing_token    BIGINT NOT NULL DEFAULT 0,
    last_polled_at   TIMESTAMPTZ,
    last_error       TEXT,
    removed_at       TIMESTAMPTZ,
    PRIMARY KEY (workspace_id, trigger_name)
);

CREATE INDEX trigger_state_due ON trigger_state (next_poll_at) WHERE removed_at IS NULL;

CREATE TABLE rule_state (
    workspace_id    TEXT NOT NULL REFERENCES workspace (id),
    rule_name       TEXT NOT NULL,
    trigger_name    TEXT NOT NULL,
    checksum        TEXT NOT NULL,
    mode            TEXT NOT NULL CHECK (mode IN ('shadow', 'live')),
    mode_changed_at TIMESTAMPTZ NOT NULL,
    tombstoned_at   TIMESTAMPTZ,
    PRIMARY KEY (workspace_id, rule_name)
);
