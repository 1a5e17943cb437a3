-- PostgreSQL's row-level security policy is rewritten for its planner; SQLite has no such policy
-- (workspaces are scoped by the application), so nothing changes here.
SELECT 1;
