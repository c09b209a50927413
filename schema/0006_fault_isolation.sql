-- One user's bad input or failing chain stays that user's: a chain whose own data or actions keep failing
-- is quarantined with its reason, an event that cannot be stored is set aside with its error, a job that
-- was withdrawn before it ran no longer holds its chain's seq, and jobs are matched to a chain through a
-- token that only batond and the chain's owner see.

-- The state machine of provisioner/service/chain_state.hpp gains `quarantined`.
ALTER TABLE chains DROP CONSTRAINT chains_state_check;
ALTER TABLE chains ADD CONSTRAINT chains_state_check CHECK (state IN
    ('running', 'successor_pending', 'handover', 'paused', 'quarantined', 'finished', 'failed', 'cancelled'));

-- Part of every job comment batond submits (baton:<chain>:<seq>:<token>): another user cannot guess the
-- key of a chain's next job from the sequential chain ids.
ALTER TABLE chains ADD COLUMN token text NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', '');

-- A cancelled chain whose jobs may still be queued or running: the tick cancels them until slurmctld
-- confirms that none is left.
ALTER TABLE chains ADD COLUMN withdraw_jobs boolean NOT NULL DEFAULT false;
CREATE INDEX chains_withdraw_jobs_idx ON chains (id) WHERE withdraw_jobs;

-- A job that ended without running (cancelled while pending, refused) gives its seq back: the chain's
-- next submission of that seq gets a job row of its own.
ALTER TABLE jobs ADD COLUMN withdrawn boolean NOT NULL DEFAULT false;
ALTER TABLE jobs DROP CONSTRAINT jobs_chain_id_restart_count_key;
CREATE UNIQUE INDEX jobs_chain_seq_key ON jobs (chain_id, restart_count) WHERE NOT withdrawn;
CREATE INDEX jobs_chain_seq_idx ON jobs (chain_id, restart_count);

-- An event whose data the database refused (dead letter): processed, with the reason, never retried.
ALTER TABLE events ADD COLUMN error text;

-- The handover signal is recorded when scancel delivered it, and sent again until the predecessor ends.
ALTER TABLE handovers ADD COLUMN signal_sent_at timestamptz;
ALTER TABLE handovers ADD COLUMN signal_attempts integer NOT NULL DEFAULT 0;

-- An ended chain that runs again records the intent of its next job for the tick ("restart"): no sbatch
-- of it is in flight anywhere, so the tick submits it at once.
ALTER TABLE submissions DROP CONSTRAINT submissions_reason_check;
ALTER TABLE submissions ADD CONSTRAINT submissions_reason_check CHECK (reason IN
    ('first', 'policy', 'reactive', 'retry', 'resubmit', 'restart'));

ALTER TABLE decisions DROP CONSTRAINT decisions_action_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_action_check CHECK (action IN
    ('wait', 'submit', 'handover', 'cancel', 'preempt', 'pause', 'resume', 'resubmit', 'finish', 'fail', 'retry',
     'quarantine', 'withdrawn'));

-- munged refuses a credential used twice, but each batond instance asks its own munged: the instances
-- record the credentials they accepted here, so that one credential is good for one request at one of
-- them. Rows older than any credential's lifetime are pruned.
CREATE TABLE credentials_used (
    digest  bytea PRIMARY KEY,
    used_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credentials_used_at_idx ON credentials_used (used_at);
