-- The workspace's time zone in force when a version was pushed: rules that name no time zone
-- of their own count their periods in it. NULL (versions pushed before this) means UTC, which is
-- what those versions were read in.
ALTER TABLE definition_version ADD COLUMN timezone TEXT;

-- Scoped reads of the surrogate-key tables lead with the workspace, as on PostgreSQL. SQLite
-- cannot change a table's key in place, so the attempts table is rebuilt with its new key.
CREATE INDEX delivery_workspace ON delivery (workspace_id, id);
CREATE INDEX inbox_message_workspace ON inbox_message (workspace_id, id);
CREATE TABLE delivery_attempt_keyed (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    delivery_id  INTEGER NOT NULL REFERENCES delivery (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    started_at   TEXT NOT NULL,
    latency_ms   INTEGER NOT NULL,
    status_code  INTEGER,
    error_class  TEXT,
    response     TEXT,
    UNIQUE (workspace_id, delivery_id, attempt)
);
INSERT INTO delivery_attempt_keyed (id, workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response)
    SELECT id, workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response FROM delivery_attempt;
DROP TABLE delivery_attempt;
ALTER TABLE delivery_attempt_keyed RENAME TO delivery_attempt;
