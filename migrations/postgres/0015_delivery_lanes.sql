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
-- can fail) is not such an operator while `=` on a smallint is; and a plain column has the
-- statistics (one row in 16 a lane) that a partial index's expression does not. The claim's
-- update leaves `id`, and so `lane`, unchanged, so it stays on its page. Only pending rows are
-- indexed, so a settle writes nothing here.
ALTER TABLE delivery ADD COLUMN lane SMALLINT GENERATED ALWAYS AS ((id % 16)::smallint) STORED;
CREATE INDEX delivery_lane ON delivery (lane, due_at, id) WHERE status = 'pending';
