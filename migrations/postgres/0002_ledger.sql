-- The fire ledger: polls (run), fires, and the occurrences once_per_n counts.

CREATE TABLE run (
    id            BIGSERIAL PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspace (id),
    trigger_name  TEXT NOT NULL,
    worker        TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    window_since  TIMESTAMPTZ NOT NULL,
    window_until  TIMESTAMPTZ NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'skipped', 'stale')),
    matched       BIGINT NOT NULL DEFAULT 0,
    fired         BIGINT NOT NULL DEFAULT 0,
    already       BIGINT NOT NULL DEFAULT 0,
    null_clocks   BIGINT NOT NULL DEFAULT 0,
    null_keys     BIGINT NOT NULL DEFAULT 0,
    error         TEXT,
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ
);

CREATE INDEX run_trigger ON run (workspace_id, trigger_name, id);

CREATE TABLE fire (
    id           BIGSERIAL PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    rule_name    TEXT NOT NULL,
    mode         TEXT NOT NULL CHECK (mode IN ('shadow', 'live')),
    dedup_key    TEXT NOT NULL,
    dedup_bucket TEXT NOT NULL,
    trigger_name TEXT NOT NULL,
    clock        TIMESTAMPTZ NOT NULL,
    row_json     TEXT NOT NULL,
    run_id       BIGINT,
    fired_at     TIMESTAMPTZ NOT NULL,
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
    count        BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, rule_name, mode, dedup_key)
);
