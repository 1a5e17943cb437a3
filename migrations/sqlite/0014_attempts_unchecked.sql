-- Recording an attempt no longer runs foreign-key checks, as on PostgreSQL: the statement that
-- records attempts writes a row only for a delivery that exists in the attempt's workspace, and
-- those that delete deliveries delete their attempts first. SQLite cannot drop a constraint in
-- place, so the attempts table is rebuilt without them.
CREATE TABLE delivery_attempt_unchecked (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT NOT NULL,
    delivery_id  INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    started_at   TEXT NOT NULL,
    latency_ms   INTEGER NOT NULL,
    status_code  INTEGER,
    error_class  TEXT,
    response     TEXT,
    UNIQUE (workspace_id, delivery_id, attempt)
);
INSERT INTO delivery_attempt_unchecked (id, workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response)
    SELECT id, workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response FROM delivery_attempt;
DROP TABLE delivery_attempt;
ALTER TABLE delivery_attempt_unchecked RENAME TO delivery_attempt;
