-- Recording an attempt no longer runs foreign-key checks. Each check locked a row for the rest of
-- the settle's transaction (the delivery's, and the workspace's, which every settle in the
-- workspace shared), and the two were most of what recording an attempt cost on PostgreSQL
-- (BENCHMARKS.md, deliver_queue). The one statement that records attempts writes a row only for
-- a delivery that exists in the attempt's workspace (it joins the delivery on both), and the two
-- that delete deliveries (pruning, a workspace's deletion) delete their attempts first.
ALTER TABLE delivery_attempt
    DROP CONSTRAINT delivery_attempt_delivery_id_fkey,
    DROP CONSTRAINT delivery_attempt_workspace_id_fkey;
