-- Names that say what they are. A job's position in its chain is its seq (Slurm's own restart count,
-- SLURM_RESTART_COUNT, is how often it requeued a job; baton calls that the requeue count). A
-- handover is keyed by its predecessor's seq, and a chain remembers the seq of its last handover's
-- predecessor.
ALTER TABLE jobs RENAME COLUMN restart_count TO seq;
ALTER TABLE jobs RENAME CONSTRAINT jobs_restart_count_check TO jobs_seq_check;
ALTER TABLE chains RENAME COLUMN generation TO last_handover_seq;
ALTER TABLE handovers RENAME COLUMN generation TO predecessor_seq;
