-- batond reads a job's step reports when it asks the job to checkpoint and exit (how to signal it
-- depends on whether its training runs under srun), so events are found by job as well.
CREATE INDEX events_job_idx ON events (slurm_job_id) WHERE slurm_job_id IS NOT NULL;
