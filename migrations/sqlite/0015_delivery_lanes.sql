-- PostgreSQL indexes sixteen lanes of pending deliveries so that concurrent senders' claims do
-- not read past each other's leases; SQLite claims with one writer at a time and reads the
-- queue as before, so nothing changes here.
SELECT 1;
