-- `batonctl preempt` asks for the current job's TERM; the tick sends it as the owner (no scancel in an
-- HTTP worker, where a slow slurmctld answer would hold one of the service's few request threads).
ALTER TABLE chains ADD COLUMN preempt_requested boolean NOT NULL DEFAULT false;
