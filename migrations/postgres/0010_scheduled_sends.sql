-- Time-anchored rules: a sweep materialises the sends of the next hours as deliveries due at
-- their anchor minus their lead. A scheduled delivery knows its anchor instant, where its lead
-- came from, and (when a sweep cancelled it because its anchor moved or its row stopped
-- matching) when it was unscheduled, so an anchor that comes back reinstates it.
ALTER TABLE delivery ADD COLUMN anchor_at TIMESTAMPTZ;
ALTER TABLE delivery ADD COLUMN lead_from TEXT CHECK (lead_from IN ('default', 'row'));
ALTER TABLE delivery ADD COLUMN unscheduled_at TIMESTAMPTZ;
CREATE INDEX delivery_scheduled ON delivery (workspace_id, rule_name, mode, anchor_at) WHERE anchor_at IS NOT NULL;

-- One row per anchored rule: when it is next swept and what its last sweep did.
CREATE TABLE sweep (
    workspace_id  TEXT NOT NULL REFERENCES workspace (id),
    rule_name     TEXT NOT NULL,
    next_sweep_at TIMESTAMPTZ NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,
    finished_at   TIMESTAMPTZ NOT NULL,
    look_until    TIMESTAMPTZ NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error         TEXT,
    report        TEXT NOT NULL,
    PRIMARY KEY (workspace_id, rule_name)
);
ALTER TABLE sweep ENABLE ROW LEVEL SECURITY;
ALTER TABLE sweep FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sweep
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));
