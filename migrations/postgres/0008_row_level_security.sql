-- Tenancy enforced by the database: every table that holds a workspace's rows admits a row
-- only when its workspace is the transaction's (`app.workspace_id`, set transaction-locally by
-- Store::begin), for reading and for writing, or when the transaction has set the explicit
-- bypass `app.bypass_rls = 'on'` (store::unscoped: the few statements that must find work
-- before they know whose it is). FORCE binds the tables' owner too; only a superuser or a role
-- with BYPASSRLS is not bound, and Rowfire's application role must be neither.

CREATE FUNCTION rowfire_admits(ws TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT ws = current_setting('app.workspace_id', true)
                 OR coalesce(current_setting('app.bypass_rls', true), '') = 'on' $$;

ALTER TABLE workspace ENABLE ROW LEVEL SECURITY;
ALTER TABLE workspace FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON workspace
    USING (rowfire_admits(id)) WITH CHECK (rowfire_admits(id));

ALTER TABLE definition_version ENABLE ROW LEVEL SECURITY;
ALTER TABLE definition_version FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON definition_version
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE trigger_state ENABLE ROW LEVEL SECURITY;
ALTER TABLE trigger_state FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON trigger_state
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE rule_state ENABLE ROW LEVEL SECURITY;
ALTER TABLE rule_state FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON rule_state
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE run ENABLE ROW LEVEL SECURITY;
ALTER TABLE run FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE fire ENABLE ROW LEVEL SECURITY;
ALTER TABLE fire FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON fire
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE occurrence ENABLE ROW LEVEL SECURITY;
ALTER TABLE occurrence FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON occurrence
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE occurrence_count ENABLE ROW LEVEL SECURITY;
ALTER TABLE occurrence_count FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON occurrence_count
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE delivery ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON delivery
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE inbox_message ENABLE ROW LEVEL SECURITY;
ALTER TABLE inbox_message FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON inbox_message
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE delivery_attempt ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_attempt FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON delivery_attempt
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE integration_state ENABLE ROW LEVEL SECURITY;
ALTER TABLE integration_state FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON integration_state
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));

ALTER TABLE secret ENABLE ROW LEVEL SECURITY;
ALTER TABLE secret FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON secret
    USING (rowfire_admits(workspace_id)) WITH CHECK (rowfire_admits(workspace_id));
