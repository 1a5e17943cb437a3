-- API tokens, as on PostgreSQL (workspace isolation on SQLite is the scoped statements').
CREATE TABLE api_token (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    name         TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    created_at   TEXT NOT NULL,
    last_used_at TEXT,
    revoked_at   TEXT
);
CREATE INDEX api_token_workspace ON api_token (workspace_id, id);
