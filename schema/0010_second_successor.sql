-- A chain may keep a second successor in the queue while the first waits (successors_in_flight = 2);
-- its submission says so.
ALTER TABLE submissions DROP CONSTRAINT submissions_reason_check;
ALTER TABLE submissions ADD CONSTRAINT submissions_reason_check CHECK (reason IN
    ('first', 'policy', 'ahead', 'reactive', 'retry', 'node_failure', 'resubmit', 'restart'));
