-- batond's tick asks, for each live chain, whether a checkpoint said the training is done: the chains
-- that did are few, and found by chain without reading the chain's whole checkpoint history.
CREATE INDEX checkpoints_training_done_idx ON checkpoints (chain_id) WHERE training_done;
