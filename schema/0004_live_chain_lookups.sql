-- batond's tick asks, for each live chain, whether a checkpoint said the training is done: the chains
-- that did are few, and found by chain without reading the chain's whole checkpoint history.
CREATE INDEX checkpoints_training_done_idx ON checkpoints (chain_id) WHERE training_done;

-- Processed events and decisions older than the retention period are deleted a batch at a time, oldest
-- first: found by time without reading the rows that stay.
CREATE INDEX events_received_idx ON events (received_at) WHERE processed_at IS NOT NULL;
CREATE INDEX decisions_decided_idx ON decisions (decided_at);
