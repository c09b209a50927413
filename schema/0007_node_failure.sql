-- A job whose node failed (NODE_FAIL, BOOT_FAIL) is followed by a successor that does not spend the
-- chain's retry budget: its submissions say so.
ALTER TABLE submissions DROP CONSTRAINT submissions_reason_check;
ALTER TABLE submissions ADD CONSTRAINT submissions_reason_check CHECK (reason IN
    ('first', 'policy', 'reactive', 'retry', 'node_failure', 'resubmit', 'restart'));
