-- Lanes for concurrent senders. A claim takes the oldest due deliveries and stamps a lease on
-- them without moving them in any index (a HOT update), so the leased rows stay at the head of
-- `delivery_due` until they are settled, and every other sender's claim reads past each of them
-- (a heap fetch that the lease then rejects): with 16 senders, some 2,100 rows a claim. Sixteen
-- lanes by id let a sender start its claim at the head of one lane, where the other senders'
-- leases are few, and take the rest of its batch from the whole queue only if the lane runs
-- short (send::queue::claim_spread).
--
-- The lane is a stored column, not an expression in the index: under row-level security the
-- planner uses an index condition only if its operators cannot leak a row's values, and `%` (it
-- can fail) is not such an operator while `=` on a smallint is. The claim's update leaves `id`,
-- and so `lane`, unchanged, so it stays on its page. Only pending rows are indexed, so a settle
-- writes nothing here.
--
-- The column keeps no statistics. With them the planner learns that lanes interleave on disk
-- (no correlation with the table's order, where the due time has one) and, on some connections,
-- reads a lane by walking `delivery_due` and skipping the other fifteen lanes, about 6,700 rows a
-- claim instead of 280 (BENCHMARKS.md, deliver_queue, twelfth session). Without them it takes a
-- lane to be a small share of the queue, which only makes the lane's own index look better.
ALTER TABLE delivery ADD COLUMN lane SMALLINT GENERATED ALWAYS AS ((id % 16)::smallint) STORED;
ALTER TABLE delivery ALTER COLUMN lane SET STATISTICS 0;
CREATE INDEX delivery_lane ON delivery (lane, due_at, id) WHERE status = 'pending';
