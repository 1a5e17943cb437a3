-- A poll reads only its window: the rows no window can hold (a NULL clock, or on SQLite a clock
-- that is not a time) are counted over the whole query at most once per interval per trigger,
-- and reported from the last count, with its age, in between. A changed trigger counts again.
ALTER TABLE trigger_state ADD COLUMN clocks_counted_at TIMESTAMPTZ;
ALTER TABLE trigger_state ADD COLUMN null_clocks BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trigger_state ADD COLUMN unreadable_clocks BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trigger_state ADD COLUMN unreadable_clock_value TEXT;
ALTER TABLE trigger_state ADD COLUMN unreadable_clock_key TEXT;


-- A delivery is updated where it lies twice: claimed (lease, token, attempts: no indexed
-- column), then settled. With room on its page the claim's update stays on the page (a HOT
-- update) and writes no index entry, instead of inserting a new entry into every index of
-- `delivery` at the head of the queue, where every claimer reads (BENCHMARKS.md, deliver_queue:
-- LWLock:BufferContent waits grew with the workers). Pages written from now on keep that room.
ALTER TABLE delivery SET (fillfactor = 70);
