-- Heartbeat leases: a trigger lease records how long it was taken for (so `status` can tell an
-- overdue trigger from one that is merely due), and every worker announces itself with a
-- heartbeat so `status` can show who holds what. Workers belong to no workspace.
ALTER TABLE trigger_state ADD COLUMN lease_ms BIGINT;

CREATE TABLE worker (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    last_seen_at TIMESTAMPTZ NOT NULL,
    stopped_at   TIMESTAMPTZ
);

CREATE INDEX worker_seen ON worker (last_seen_at);
