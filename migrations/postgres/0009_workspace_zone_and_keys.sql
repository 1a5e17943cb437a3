-- The workspace's time zone in force when a version was pushed: rules that name no time zone
-- of their own count their periods in it. NULL (versions pushed before this) means UTC, which is
-- what those versions were read in.
ALTER TABLE definition_version ADD COLUMN timezone TEXT;

-- Scoped reads of the surrogate-key tables lead with the workspace: the newest deliveries and
-- inbox messages of one workspace are a range of one index, not a scan past every other
-- workspace's rows, and an attempt's key names its workspace.
CREATE INDEX delivery_workspace ON delivery (workspace_id, id);
CREATE INDEX inbox_message_workspace ON inbox_message (workspace_id, id);
ALTER TABLE delivery_attempt DROP CONSTRAINT delivery_attempt_delivery_id_attempt_key;
ALTER TABLE delivery_attempt ADD CONSTRAINT delivery_attempt_key UNIQUE (workspace_id, delivery_id, attempt);
