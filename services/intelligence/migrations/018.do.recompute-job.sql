-- Recomputes run on the job runner (docs/adr/0051): unfinished ones get the job that works them off.
INSERT INTO jobs (task, job_key, max_attempts)
SELECT 'intelligence.recompute', '', NULL WHERE EXISTS (SELECT 1 FROM recompute_jobs WHERE finished_at IS NULL)
ON CONFLICT (task, job_key) WHERE job_key IS NOT NULL DO NOTHING;
