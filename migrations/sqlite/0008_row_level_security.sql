-- SQLite has no row-level security: an embedded control plane scopes every statement to its
-- workspace in the application (Store::begin), and database-enforced isolation needs PostgreSQL.
SELECT 1;
