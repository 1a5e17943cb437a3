-- A poll reads only its window: the rows no window can hold (a NULL clock, or on SQLite a clock
-- that is not a time) are counted over the whole query at most once per interval per trigger,
-- and reported from the last count, with its age, in between. A changed trigger counts again.
ALTER TABLE trigger_state ADD COLUMN clocks_counted_at TEXT;
ALTER TABLE trigger_state ADD COLUMN null_clocks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trigger_state ADD COLUMN unreadable_clocks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trigger_state ADD COLUMN unreadable_clock_value TEXT;
ALTER TABLE trigger_state ADD COLUMN unreadable_clock_key TEXT;

