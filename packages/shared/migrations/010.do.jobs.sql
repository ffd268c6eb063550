-- The job runner's queue (docs/adr/0051): every background task of a service — a one-off job
-- enqueued in the caller's transaction, or a recurring one — is a row here, claimed with
-- FOR UPDATE SKIP LOCKED under a lease, so that several instances share the work and a crashed
-- instance's job runs again once its lease has passed.
CREATE TABLE jobs (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task         text        NOT NULL,
  -- At most one job per (task, key): enqueueing it again updates the waiting one.
  job_key      text,
  payload      jsonb       NOT NULL DEFAULT '{}'::jsonb,
  run_at       timestamptz NOT NULL DEFAULT now(),
  -- Recurring: the next run is the first slot run_at + k·period after now; never failed for good.
  period_ms    integer     CHECK (period_ms > 0),
  attempts     integer     NOT NULL DEFAULT 0,
  -- NULL: retried until it succeeds.
  max_attempts integer     CHECK (max_attempts > 0),
  -- Bumped by every enqueue: a run that finishes an older revision leaves the newer one waiting.
  revision     integer     NOT NULL DEFAULT 0,
  locked_by    text,
  locked_until timestamptz,
  last_error   text,
  failed_at    timestamptz,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX jobs_task_key ON jobs (task, job_key) WHERE job_key IS NOT NULL;
CREATE INDEX jobs_due ON jobs (run_at, id) WHERE failed_at IS NULL;
