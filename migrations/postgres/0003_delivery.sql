-- Deliveries: one rendered request per binding of a fire, written with the fire. And the Demo
-- inbox, where deliveries to inbox://demo land.

CREATE TABLE delivery (
    id               BIGSERIAL PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspace (id),
    fire_id          BIGINT NOT NULL REFERENCES fire (id),
    rule_name        TEXT NOT NULL,
    mode             TEXT NOT NULL CHECK (mode IN ('shadow', 'live')),
    binding          BIGINT NOT NULL,
    integration      TEXT NOT NULL,
    action           TEXT NOT NULL,
    recipient        TEXT,
    method           TEXT,
    url              TEXT,
    headers          TEXT,
    body             TEXT,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'skipped', 'suppressed', 'failed', 'dead', 'expired', 'cancelled')),
    reason           TEXT,
    due_at           TIMESTAMPTZ NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    claimed_at       TIMESTAMPTZ,
    lease_expires_at TIMESTAMPTZ,
    fencing_token    BIGINT NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ NOT NULL,
    sent_at          TIMESTAMPTZ,
    UNIQUE (workspace_id, fire_id, binding)
);

CREATE INDEX delivery_due ON delivery (due_at) WHERE status = 'pending';

CREATE TABLE inbox_message (
    id           BIGSERIAL PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    delivery_id  BIGINT NOT NULL REFERENCES delivery (id),
    action       TEXT NOT NULL,
    recipient    TEXT,
    body         TEXT NOT NULL,
    received_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (workspace_id, delivery_id)
);
