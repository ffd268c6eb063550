-- Index builds run on the job runner (docs/adr/0051): the requests not built yet become its jobs.
INSERT INTO jobs (task, job_key, max_attempts)
SELECT 'data.build-index', name, 5 FROM storage_indexes WHERE state IN ('pending', 'building')
ON CONFLICT (task, job_key) WHERE job_key IS NOT NULL DO NOTHING;
