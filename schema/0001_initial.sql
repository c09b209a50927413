-- baton's state: chains of Slurm jobs, their checkpoints, the events reported about them, the
-- provisioner's decisions and predictions, the checkpointer's tuning, trained models, and imported
-- job traces. Applied by `batonctl db migrate` inside one transaction; never edit once released,
-- add a new NNNN_name.sql instead.

CREATE TABLE chains (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name <> ''),
    chain_dir   text,
    state       text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'finished', 'failed', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per Slurm job of a chain.
CREATE TABLE jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id      bigint NOT NULL REFERENCES chains (id) ON DELETE CASCADE,
    slurm_job_id  bigint NOT NULL UNIQUE CHECK (slurm_job_id >= 0),
    restart_count integer NOT NULL CHECK (restart_count >= 0),
    name          text,
    submit_time   timestamptz,
    start_time    timestamptz,
    end_time      timestamptz,
    time_limit_s  bigint CHECK (time_limit_s >= 0),
    nodes         integer CHECK (nodes > 0),
    state         text NOT NULL DEFAULT 'PENDING',
    reason        text,
    UNIQUE (chain_id, restart_count),
    CHECK (end_time IS NULL OR start_time IS NULL OR end_time >= start_time)
);
CREATE INDEX jobs_state_idx ON jobs (state) WHERE end_time IS NULL;

-- Checkpoints whose manifests were reported (docs/contracts.md).
CREATE TABLE checkpoints (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id        bigint NOT NULL REFERENCES chains (id) ON DELETE CASCADE,
    slurm_job_id    bigint,
    iteration       bigint NOT NULL CHECK (iteration >= 0),
    epoch           bigint NOT NULL DEFAULT 0,
    path            text NOT NULL,
    total_bytes     bigint NOT NULL CHECK (total_bytes >= 0),
    snapshot_s      double precision,
    persist_s       double precision,
    created_at      timestamptz NOT NULL,
    manifest        jsonb NOT NULL,
    UNIQUE (chain_id, iteration)
);

-- Raw events from the plugin and the checkpointer; delivered at least once, stored once.
CREATE TABLE events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key  text NOT NULL UNIQUE CHECK (idempotency_key <> ''),
    kind             text NOT NULL,
    chain_name       text,
    slurm_job_id     bigint,
    payload          jsonb NOT NULL,
    received_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_chain_idx ON events (chain_name, received_at);

-- Every policy decision, with what it saw and what it did.
CREATE TABLE decisions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id    bigint NOT NULL REFERENCES chains (id) ON DELETE CASCADE,
    decided_at  timestamptz NOT NULL DEFAULT now(),
    policy      text NOT NULL,
    action      text NOT NULL CHECK (action IN ('wait', 'submit', 'handover', 'cancel')),
    inputs      jsonb NOT NULL DEFAULT '{}',
    outcome     text
);
CREATE INDEX decisions_chain_idx ON decisions (chain_id, decided_at);

-- Trained wait-time predictors and their metrics; the model file lives at `path`.
CREATE TABLE models (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL,
    version     integer NOT NULL CHECK (version > 0),
    kind        text NOT NULL,
    path        text,
    trained_at  timestamptz NOT NULL DEFAULT now(),
    params      jsonb NOT NULL DEFAULT '{}',
    metrics     jsonb NOT NULL DEFAULT '{}',
    UNIQUE (name, version)
);

-- Predicted against actual queue wait of a job.
CREATE TABLE predictions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_id          bigint REFERENCES chains (id) ON DELETE CASCADE,
    slurm_job_id      bigint,
    model_id          bigint REFERENCES models (id) ON DELETE SET NULL,
    predicted_at      timestamptz NOT NULL DEFAULT now(),
    quantile          double precision CHECK (quantile > 0 AND quantile < 1),
    predicted_wait_s  double precision NOT NULL,
    actual_wait_s     double precision
);
CREATE INDEX predictions_job_idx ON predictions (slurm_job_id);
CREATE INDEX predictions_model_idx ON predictions (model_id);

-- The checkpointer's tuning state per chain (the manifest's `tuning` object).
CREATE TABLE tuning (
    chain_id           bigint PRIMARY KEY REFERENCES chains (id) ON DELETE CASCADE,
    profile            text NOT NULL,
    interval_k         integer NOT NULL CHECK (interval_k > 0),
    iteration_s        double precision,
    snapshot_s         double precision,
    persist_s          double precision,
    overhead_percent   double precision,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- Imported job traces: one row per trace, its jobs in trace_jobs.
CREATE TABLE traces (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL UNIQUE CHECK (name <> ''),
    format        text NOT NULL,
    source        text NOT NULL,
    imported_at   timestamptz NOT NULL DEFAULT now(),
    rows_read     bigint NOT NULL DEFAULT 0,
    rows_accepted bigint NOT NULL DEFAULT 0,
    rejected      jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE trace_jobs (
    trace_id         bigint NOT NULL REFERENCES traces (id) ON DELETE CASCADE,
    seq              integer NOT NULL,
    job_id           bigint NOT NULL,
    name             text NOT NULL,
    user_name        text NOT NULL,
    submit_time      timestamptz NOT NULL,
    start_time       timestamptz,
    end_time         timestamptz,
    time_limit_s     bigint,
    nodes            integer NOT NULL CHECK (nodes > 0),
    priority         bigint,
    exit_code        integer,
    state            text,
    requested_procs  integer,
    requested_time_s bigint,
    run_time_s       bigint,
    wait_s           bigint,
    PRIMARY KEY (trace_id, seq)
);
