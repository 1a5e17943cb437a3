-- The same policy, written so the planner can estimate it. Compared as text, the bypass flag has
-- no column to take statistics from and is guessed to admit 0.5% of rows; under the bypass the
-- delivery claim's first plans then scanned and sorted the whole table instead of reading the
-- partial index over pending rows (BENCHMARKS.md, tenancy_rls). Read as a boolean it is guessed
-- at half, and the claim keeps its index. Unset or empty still means off, and a value that is
-- not a boolean fails the statement rather than admitting anything.
CREATE OR REPLACE FUNCTION rowfire_admits(ws TEXT) RETURNS BOOLEAN
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT ws = current_setting('app.workspace_id', true)
                 OR coalesce(nullif(current_setting('app.bypass_rls', true), ''), 'off')::boolean $$;
