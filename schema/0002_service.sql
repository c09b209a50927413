-- batond: chains owned by a uid and named within that owner, the chain state machine, submissions
-- with idempotency keys, handovers, and events that the leader processes once.

-- A chain belongs to the uid of its first job (from slurmctld) and is named within that owner.
ALTER TABLE chains DROP CONSTRAINT chains_name_key;
ALTER TABLE chains ADD COLUMN owner_uid bigint NOT NULL DEFAULT 0 CHECK (owner_uid >= 0);
ALTER TABLE chains ADD COLUMN owner_name text;
ALTER TABLE chains ADD CONSTRAINT chains_owner_name_key UNIQUE (owner_uid, name);

-- The state machine of provisioner/service/chain_state.hpp.
ALTER TABLE chains DROP CONSTRAINT chains_state_check;
UPDATE chains SET state = 'running' WHERE state = 'active';
ALTER TABLE chains ALTER COLUMN state SET DEFAULT 'running';
ALTER TABLE chains ADD CONSTRAINT chains_state_check CHECK (state IN
    ('running', 'successor_pending', 'handover', 'paused', 'finished', 'failed', 'cancelled'));
ALTER TABLE chains ADD COLUMN seq integer NOT NULL DEFAULT 0 CHECK (seq >= 0);   -- the current job's
ALTER TABLE chains ADD COLUMN generation integer NOT NULL DEFAULT -1;  -- last handover's predecessor seq
ALTER TABLE chains ADD COLUMN retries integer NOT NULL DEFAULT 0 CHECK (retries >= 0);
ALTER TABLE chains ADD COLUMN reason text;                       -- why it failed, paused or was cancelled
ALTER TABLE chains ADD COLUMN spec jsonb;                        -- how to submit its next job
ALTER TABLE chains ADD COLUMN resubmit_requested boolean NOT NULL DEFAULT false;
CREATE INDEX chains_live_idx ON chains (state) WHERE state NOT IN ('finished', 'failed', 'cancelled');

ALTER TABLE jobs ADD COLUMN exit_code integer;
ALTER TABLE jobs ADD COLUMN owner_uid bigint;

-- Every submission batond makes, written (state 'intent') before sbatch runs. The key goes into the
-- job's --comment, so that a restarted batond finds the job in squeue instead of submitting it twice.
CREATE TABLE submissions (
    chain_id       bigint NOT NULL REFERENCES chains (id) ON DELETE CASCADE,
    seq            integer NOT NULL CHECK (seq >= 0),
    idempotency_key text NOT NULL UNIQUE,
    reason         text NOT NULL CHECK (reason IN ('first', 'policy', 'reactive', 'retry', 'resubmit')),
    state          text NOT NULL DEFAULT 'intent' CHECK (state IN ('intent', 'submitted', 'failed', 'cancelled')),
    slurm_job_id   bigint,
    error          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    submitted_at   timestamptz,
    PRIMARY KEY (chain_id, seq)
);

-- One row per handover: the successor started while its predecessor ran; the predecessor was signalled
-- to checkpoint and exit. handover_s = predecessor end - signal.
CREATE TABLE handovers (
    chain_id           bigint NOT NULL REFERENCES chains (id) ON DELETE CASCADE,
    generation         integer NOT NULL,
    predecessor_job_id bigint NOT NULL,
    successor_job_id   bigint NOT NULL,
    signalled_at       timestamptz NOT NULL DEFAULT now(),
    completed_at       timestamptz,
    handover_s         double precision,
    PRIMARY KEY (chain_id, generation)
);

-- Events are stored by the HTTP front end (any instance) and processed once by the leader.
ALTER TABLE events ADD COLUMN sender_uid bigint;
ALTER TABLE events ADD COLUMN processed_at timestamptz;
CREATE INDEX events_unprocessed_idx ON events (id) WHERE processed_at IS NULL;

ALTER TABLE checkpoints ADD COLUMN training_done boolean NOT NULL DEFAULT false;
ALTER TABLE checkpoints ADD COLUMN final boolean NOT NULL DEFAULT false;

-- Decisions now also record what users and operators asked for and how a chain ended.
ALTER TABLE decisions DROP CONSTRAINT decisions_action_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_action_check CHECK (action IN
    ('wait', 'submit', 'handover', 'cancel', 'preempt', 'pause', 'resume', 'resubmit', 'finish', 'fail', 'retry'));
