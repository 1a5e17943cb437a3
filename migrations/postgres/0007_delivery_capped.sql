-- Whether a delivery was held back by its rule's frequency cap, as a flag rather than words in
-- its reason, so the cap counts what reached (or in shadow would have reached) a recipient
-- without reading any reason's text. Deliveries stored before this knew it only in their reason.
ALTER TABLE delivery ADD COLUMN capped BOOLEAN NOT NULL DEFAULT false;
UPDATE delivery SET capped = true WHERE status = 'suppressed' AND reason LIKE '%frequency cap: %';
