-- API tokens: each lets its bearer act in one workspace through `rowfire serve`. Only the
-- SHA-256 of the secret is stored; `id` is the token's public handle (listed, revoked), and the
-- secret is shown once, when it is created.
CREATE TABLE api_token (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspace (id),
    name         TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL,
    last_used_at TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ
);
CREATE INDEX api_token_workspace ON api_token (workspace_id, id);

ALTER TABLE api_token ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_token FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON api_token
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));
