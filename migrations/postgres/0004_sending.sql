-- Sending: every attempt at a delivery, each integration's state (enabled, shared pace), sealed
-- secrets, and a rule's expiry on its deliveries.

-- The claim orders pending deliveries by (due_at, id): the partial index covers both, so a claim
-- reads the first rows of the index however many deliveries are pending or were sent.
DROP INDEX delivery_due;
CREATE INDEX delivery_due ON delivery (due_at, id) WHERE status = 'pending';

ALTER TABLE delivery ADD COLUMN expires_at TIMESTAMPTZ;

-- Frequency caps count a recipient's recent deliveries of one rule in one mode.
CREATE INDEX delivery_recipient ON delivery (workspace_id, rule_name, mode, recipient, created_at);

CREATE TABLE delivery_attempt (
    id           BIGSERIAL PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    delivery_id  BIGINT NOT NULL REFERENCES delivery (id) ON DELETE CASCADE,
    attempt      BIGINT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    latency_ms   BIGINT NOT NULL,
    status_code  INTEGER,
    error_class  TEXT,
    response     TEXT,
    UNIQUE (delivery_id, attempt)
);

CREATE TABLE integration_state (
    workspace_id    TEXT NOT NULL REFERENCES workspace (id),
    name            TEXT NOT NULL,
    disabled_at     TIMESTAMPTZ,
    disabled_reason TEXT,
    paused_until    TIMESTAMPTZ,
    PRIMARY KEY (workspace_id, name)
);

CREATE TABLE secret (
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    owner        TEXT NOT NULL,
    name         TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    sealed       TEXT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (workspace_id, owner, name)
);
