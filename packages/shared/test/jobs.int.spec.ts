import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { inTransaction } from '../src/db/transaction.js';
import { enqueueJob, type JobContext, JobRunner, type TaskOptions } from '../src/jobs/runner.js';
import { kernelMigrations } from '../src/kernel-migrations.js';
import { createTestDatabase, eventually, type TestDatabase, testEndpoints } from '../src/testing/index.js';

const quiet = { info() {}, warn() {} };

describe('job runner', () => {
  let db: TestDatabase;
  let pool: pg.Pool;
  const runners: JobRunner[] = [];

  beforeAll(async () => {
    db = await createTestDatabase(testEndpoints().postgresUrl, [kernelMigrations]);
    pool = new pg.Pool({ connectionString: db.url, max: 20 });
    await pool.query(`CREATE TABLE runs (id bigint GENERATED ALWAYS AS IDENTITY, task text, job_key text,
      worker text, attempt int, slot timestamptz, at timestamptz DEFAULT clock_timestamp())`);
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });
  beforeEach(async () => {
    await pool.query('TRUNCATE jobs, runs');
  });
  afterEach(async () => {
    await Promise.all(runners.splice(0).map((r) => r.stop()));
  });

  function runner(workerId: string, define: (r: JobRunner) => void, pollMs = 50) {
    const r = new JobRunner({ pool, logger: quiet, pollMs, workerId });
    define(r);
    runners.push(r);
    return r;
  }

  const record = (worker: string) => async (job: JobContext) => {
    await pool.query('INSERT INTO runs (task, job_key, worker, attempt, slot) VALUES ($1, $2, $3, $4, $5)', [
      job.task,
      job.key,
      worker,
      job.attempt,
      job.scheduledAt,
    ]);
  };

  const runs = async (task: string) =>
    (
      await pool.query<{ job_key: string | null; worker: string; attempt: number; ms: number; slot: number }>(
        `SELECT job_key, worker, attempt, (extract(epoch FROM at) * 1000)::float8 AS ms,
                (extract(epoch FROM slot) * 1000)::float8 AS slot FROM runs
          WHERE task = $1 ORDER BY id`,
        [task],
      )
    ).rows;

  it('runs each job once although several runners claim at the same time', async () => {
    for (let i = 0; i < 60; i++) await enqueueJob(pool, 'work', { key: `k${i}` });
    let concurrent = 0;
    let most = 0;
    for (const id of ['a', 'b', 'c']) {
      const write = record(id);
      runner(id, (r) =>
        r.define(
          'work',
          async (job) => {
            most = Math.max(most, ++concurrent);
            await new Promise((resolve) => setTimeout(resolve, 5));
            await write(job);
            concurrent--;
          },
          { concurrency: 2 },
        ),
      );
    }
    await Promise.all(runners.map((r) => r.start()));
    await eventually('every job to run', async () => (await runs('work')).length >= 60);
    await eventually('the queue to empty', async () => (await pool.query('SELECT 1 FROM jobs')).rowCount === 0);
    const done = await runs('work');
    expect(done).toHaveLength(60);
    expect(new Set(done.map((r) => r.job_key)).size).toBe(60);
    expect(done.every((r) => r.attempt === 1)).toBe(true);
    expect(new Set(done.map((r) => r.worker)).size).toBeGreaterThan(1);
    expect(most).toBeGreaterThan(1);
  });

  it('runs a job enqueued in a transaction only once it commits', async () => {
    const r = runner('a', (r) => r.define('work', record('a')));
    await r.start();
    await expect(
      inTransaction(pool, async (tx) => {
        await enqueueJob(tx, 'work', { key: 'rolled-back' });
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    await inTransaction(pool, (tx) => enqueueJob(tx, 'work', { key: 'committed' }));
    await eventually('the committed job to run', async () => (await runs('work')).length === 1);
    // The committed job was enqueued after the rolled-back one: had that one existed, it ran first.
    expect((await runs('work')).map((r) => r.job_key)).toEqual(['committed']);
    expect((await pool.query('SELECT 1 FROM jobs')).rowCount).toBe(0);
  });

  it("runs a crashed runner's job again once its lease has passed", async () => {
    await enqueueJob(pool, 'work', { key: 'orphan' });
    // What a runner that died mid-job leaves: a claim it no longer extends.
    await pool.query(
      `UPDATE jobs SET attempts = 1, locked_by = 'dead', locked_until = clock_timestamp() + interval '600 milliseconds'`,
    );
    const leaseEnds = (
      await pool.query<{ ms: number }>('SELECT (extract(epoch FROM locked_until) * 1000)::float8 AS ms FROM jobs')
    ).rows[0]?.ms as number;
    await runner('b', (r) => r.define('work', record('b'))).start();
    await eventually('the orphaned job to run again', async () => (await runs('work')).length === 1);
    const [run] = await runs('work');
    expect(run).toMatchObject({ job_key: 'orphan', worker: 'b', attempt: 2 });
    expect(run?.ms).toBeGreaterThanOrEqual(leaseEnds);
  });

  it('keeps extending the lease of a job that runs longer than it', async () => {
    await enqueueJob(pool, 'slow', { key: 'long' });
    let release: () => void = () => {};
    const started = new Promise<void>((resolve) => {
      const write = record('a');
      runner('a', (r) =>
        r.define(
          'slow',
          async (job) => {
            resolve();
            await new Promise<void>((done) => {
              release = done;
            });
            await write(job);
          },
          { leaseMs: 300 },
        ),
      );
    });
    await runners[0]?.start();
    await started;
    const b = runner('b', (r) => r.define('slow', record('b'), { leaseMs: 300 }));
    await b.start();
    // Three leases long: b would have taken it had a not extended its claim.
    await new Promise((resolve) => setTimeout(resolve, 900));
    release();
    await eventually('the long job to finish', async () => (await runs('slow')).length === 1);
    expect((await runs('slow')).map((r) => r.worker)).toEqual(['a']);
  });

  it('retries a failing job with backoff, then fails it for good after its attempts', async () => {
    const failures: { attempt: number; error: string }[] = [];
    const options: TaskOptions = {
      backoff: { initialMs: 150, maxMs: 10_000 },
      onFailed: async (job, error) => {
        failures.push({ attempt: job.attempt, error: (error as Error).message });
      },
    };
    const write = record('a');
    await runner('a', (r) =>
      r.define(
        'flaky',
        async (job) => {
          await write(job);
          throw new Error(`attempt ${job.attempt} broke`);
        },
        options,
      ),
    ).start();
    await enqueueJob(pool, 'flaky', { key: 'x', maxAttempts: 3 });
    await eventually('the job to fail for good', async () => failures.length === 1);
    const done = await runs('flaky');
    expect(done.map((r) => r.attempt)).toEqual([1, 2, 3]);
    // 150 ms before the second attempt, 300 ms before the third.
    expect((done[1]?.ms as number) - (done[0]?.ms as number)).toBeGreaterThanOrEqual(140);
    expect((done[2]?.ms as number) - (done[1]?.ms as number)).toBeGreaterThanOrEqual(290);
    expect(failures).toEqual([{ attempt: 3, error: 'attempt 3 broke' }]);
    const { rows } = await pool.query('SELECT attempts, last_error, failed_at IS NOT NULL AS failed FROM jobs');
    expect(rows).toEqual([{ attempts: 3, last_error: 'attempt 3 broke', failed: true }]);
    // Enqueued again, a failed job gets its attempts anew.
    await enqueueJob(pool, 'flaky', { key: 'x', maxAttempts: 1 });
    await eventually('the revived job to fail again', async () => failures.length === 2);
    expect((await runs('flaky')).map((r) => r.attempt)).toEqual([1, 2, 3, 1]);
  });

  it('runs a recurring job once per period across several instances', async () => {
    const period = 250;
    for (const id of ['a', 'b', 'c']) runner(id, (r) => r.every('tick', period, record(id)), 20);
    await Promise.all(runners.map((r) => r.start()));
    await eventually('six periods', async () => (await runs('tick')).length >= 6, { timeoutMs: 10_000 });
    await Promise.all(runners.splice(0).map((r) => r.stop()));
    const done = await runs('tick');
    // One run per slot, whichever instance took it; the slots a whole number of periods apart.
    const gaps = done.slice(1).map((r, i) => r.slot - (done[i]?.slot as number));
    for (const gap of gaps) {
      expect(gap).toBeGreaterThanOrEqual(period - 1);
      expect(Math.abs(gap / period - Math.round(gap / period))).toBeLessThan(0.01);
    }
    // A run starts at its slot or after it, before the next one begins.
    for (const run of done) expect(run.ms).toBeGreaterThanOrEqual(run.slot - 1);
    expect(new Set(done.map((r) => r.worker)).size).toBeGreaterThan(1);
    expect((await pool.query('SELECT task, job_key FROM jobs')).rows).toEqual([{ task: 'tick', job_key: '' }]);
  });

  it('runs a job again without counting an attempt when it asks to', async () => {
    let passes = 0;
    const write = record('a');
    await runner('a', (r) =>
      r.define('batches', async (job) => {
        await write(job);
        return ++passes < 3 ? { rerunInMs: 0 } : undefined;
      }),
    ).start();
    await enqueueJob(pool, 'batches', { key: 'b' });
    await eventually('three passes', async () => (await pool.query('SELECT 1 FROM jobs')).rowCount === 0);
    expect((await runs('batches')).map((r) => r.attempt)).toEqual([1, 1, 1]);
  });

  it('runs a job enqueued again while it ran once more, with the newer payload', async () => {
    let release: () => void = () => {};
    const seen: unknown[] = [];
    await runner('a', (r) =>
      r.define('work', async (job) => {
        seen.push(job.payload);
        if (seen.length === 1) {
          await new Promise<void>((done) => {
            release = done;
          });
        }
      }),
    ).start();
    await enqueueJob(pool, 'work', { key: 'k', payload: { n: 1 } });
    await eventually('the first run', () => seen.length === 1);
    await enqueueJob(pool, 'work', { key: 'k', payload: { n: 2 } });
    release();
    await eventually('the second run', () => seen.length === 2);
    await eventually('the queue to empty', async () => (await pool.query('SELECT 1 FROM jobs')).rowCount === 0);
    expect(seen).toEqual([{ n: 1 }, { n: 2 }]);
  });
});
