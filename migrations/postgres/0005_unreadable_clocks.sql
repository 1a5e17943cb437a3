-- A poll counts rows whose clock is there but is not a time apart from rows whose clock is NULL,
-- and keeps one of them (its clock as stored and its key) so the run says what to fix.
ALTER TABLE run ADD COLUMN unreadable_clocks BIGINT NOT NULL DEFAULT 0;
ALTER TABLE run ADD COLUMN unreadable_clock_example TEXT;
