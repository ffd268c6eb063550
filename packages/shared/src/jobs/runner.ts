/**
 * The job runner (docs/adr/0051): every background task of a service — a one-off job enqueued in
 * the caller's transaction, or a recurring one — is a row of `jobs`, claimed with FOR UPDATE SKIP
 * LOCKED under a lease that the running instance extends. Several instances share the work and
 * never run a job twice at once; a crashed instance's job runs again once its lease has passed; a
 * failure is retried with backoff up to the job's attempts; a recurring job runs once per period
 * whatever the number of instances.
 */
import { hostname } from 'node:os';
import type pg from 'pg';
import { type Backoff, backoffDelay } from '../backoff.js';
import { onCommit } from '../db/transaction.js';
import { uuidv7 } from '../ids/uuidv7.js';
import type { Queryable } from '../outbox/outbox.js';

/** What a handler is given: the job and a signal raised when the runner stops. */
export interface JobContext<P = unknown> {
  jobId: string;
  task: string;
  key: string | null;
  payload: P;
  /** 1 for the first attempt. */
  attempt: number;
  /** When it was due: a recurring job's slot. */
  scheduledAt: Date;
  /** Aborted when the runner stops: a long job gives up (its lease lets another instance take it). */
  signal: AbortSignal;
}

/**
 * What a run answers: nothing when it is done (a one-off job goes, a recurring one waits for its
 * next period), or `rerunInMs` to run the same job again — more of it is left, or it cannot go on
 * yet — without counting an attempt.
 */
export type JobOutcome = undefined | { rerunInMs: number };

export type JobHandler<P = unknown> = (job: JobContext<P>) => Promise<JobOutcome | undefined | unknown>;

export interface TaskOptions<P = unknown> {
  /** How long a claim holds without being extended (every third of it while the job runs): how soon a crashed instance's job is taken again. 10 s unless said. */
  leaseMs?: number;
  /** Jobs of this task running at once in this instance; 1 unless said. */
  concurrency?: number;
  /** The wait before a failed job runs again, by attempt. */
  backoff?: Backoff;
  /** Called once a one-off job has failed its last attempt (mark what it was for as failed). */
  onFailed?: (job: JobContext<P>, error: unknown) => Promise<void>;
}

export interface JobRunnerOptions {
  pool: pg.Pool;
  logger: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
  /** The longest wait between two looks at the queue (jobs enqueued elsewhere are seen then). */
  pollMs?: number;
  /** This runner's name in `locked_by`; unique per process unless said. */
  workerId?: string;
  /** Jobs of every task running at once in this instance (each may hold a pooled connection); 5 unless said. */
  concurrency?: number;
}

export interface EnqueueOptions {
  /** At most one waiting job per (task, key): enqueueing it again updates it. */
  key?: string;
  payload?: unknown;
  /** From now; at once unless said. */
  delayMs?: number;
  /** null: retried until it succeeds. 25 unless said. */
  maxAttempts?: number | null;
}

interface Task {
  handler: JobHandler;
  leaseMs: number;
  concurrency: number;
  backoff: Backoff;
  onFailed: ((job: JobContext, error: unknown) => Promise<void>) | undefined;
  periodMs: number | undefined;
  running: number;
}

interface Claimed {
  id: string;
  task: string;
  job_key: string | null;
  payload: unknown;
  attempts: number;
  max_attempts: number | null;
  period_ms: number | null;
  revision: number;
  run_at: Date;
}

const DEFAULT_BACKOFF: Backoff = { initialMs: 1000, maxMs: 60_000 };

/** The waker of every runner of this process, called once a transaction that enqueued has committed. */
const localWakers = new Set<() => void>();
const wakeRunners = () => {
  for (const wake of localWakers) wake();
};

/**
 * Enqueues a job of `task` on `db` — a transaction's client: the job exists only if it commits.
 * The runners of this process are woken once it has; others find it at their next poll.
 */
export async function enqueueJob(db: Queryable, task: string, options: EnqueueOptions = {}): Promise<void> {
  await db.query(
    `INSERT INTO jobs (task, job_key, payload, run_at, max_attempts)
     VALUES ($1, $2, $3, now() + make_interval(secs => $4::float8 / 1000), $5)
     ON CONFLICT (task, job_key) WHERE job_key IS NOT NULL DO UPDATE SET
       payload = excluded.payload, max_attempts = excluded.max_attempts, revision = jobs.revision + 1,
       run_at = CASE WHEN jobs.failed_at IS NULL AND jobs.locked_until IS NULL
                     THEN least(jobs.run_at, excluded.run_at) ELSE excluded.run_at END,
       attempts = CASE WHEN jobs.failed_at IS NULL THEN jobs.attempts ELSE 0 END,
       failed_at = NULL`,
    [
      task,
      options.key ?? null,
      JSON.stringify(options.payload ?? {}),
      options.delayMs ?? 0,
      options.maxAttempts === undefined ? 25 : options.maxAttempts,
    ],
  );
  if (!onCommit(db, wakeRunners) && !('release' in db)) wakeRunners();
}

export class JobRunner {
  private readonly tasks = new Map<string, Task>();
  private readonly pollMs: number;
  readonly workerId: string;
  private stopped = true;
  /** Stopped for good: a start still under way does not begin taking jobs. */
  private closed = false;
  private loopDone: Promise<void> | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly abort = new Set<AbortController>();
  private woken = false;
  private wakeSleeper: (() => void) | undefined;
  private failing = false;
  private readonly waker = () => this.wake();

  constructor(private readonly opts: JobRunnerOptions) {
    this.pollMs = opts.pollMs ?? 1000;
    this.workerId = opts.workerId ?? `${hostname()}:${process.pid}:${uuidv7().slice(-12)}`;
  }

  /** Runs jobs of `task` (enqueued with enqueueJob) with `handler`. */
  define<P = unknown>(task: string, handler: JobHandler<P>, options: TaskOptions<P> = {}): void {
    this.add(task, handler as JobHandler, options as TaskOptions, undefined);
  }

  /** Runs `handler` once every `periodMs` across every instance that defines `task`. */
  every(task: string, periodMs: number, handler: JobHandler<undefined>, options: TaskOptions<undefined> = {}): void {
    if (!(periodMs > 0)) throw new Error(`the period of ${task} must be positive`);
    this.add(task, handler as JobHandler, options as TaskOptions, Math.ceil(periodMs));
  }

  private add(task: string, handler: JobHandler, options: TaskOptions, periodMs: number | undefined) {
    if (this.tasks.has(task)) throw new Error(`the task ${task} is defined twice`);
    if (!this.stopped) throw new Error(`the task ${task} is defined after the runner started`);
    this.tasks.set(task, {
      handler,
      leaseMs: options.leaseMs ?? 10_000,
      concurrency: options.concurrency ?? 1,
      backoff: options.backoff ?? DEFAULT_BACKOFF,
      onFailed: options.onFailed,
      periodMs,
      running: 0,
    });
  }

  /** Writes the recurring jobs' rows (a new one is due at once) and starts taking jobs. */
  async start(): Promise<void> {
    if (!this.stopped || this.closed) return;
    const recurring = [...this.tasks].filter(([, t]) => t.periodMs !== undefined);
    if (recurring.length > 0) {
      // A changed period takes effect from the next run; a row another instance wrote stays as it is.
      await this.opts.pool.query(
        `INSERT INTO jobs (task, job_key, period_ms, max_attempts)
         SELECT t, '', p, NULL FROM unnest($1::text[], $2::int[]) AS x(t, p)
         ON CONFLICT (task, job_key) WHERE job_key IS NOT NULL DO UPDATE SET period_ms = excluded.period_ms,
           run_at = least(jobs.run_at, now() + make_interval(secs => excluded.period_ms::float8 / 1000)),
           failed_at = NULL`,
        [recurring.map(([name]) => name), recurring.map(([, t]) => t.periodMs)],
      );
    }
    if (this.closed) return;
    this.stopped = false;
    localWakers.add(this.waker);
    this.loopDone = this.loop();
  }

  /** Stops taking jobs, aborts those running and waits for them, at most `waitMs`. */
  async stop(waitMs = 5000): Promise<void> {
    this.closed = true;
    if (this.stopped) return;
    this.stopped = true;
    localWakers.delete(this.waker);
    for (const controller of this.abort) controller.abort();
    this.wake();
    let bound: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      bound = setTimeout(resolve, waitMs);
    });
    await Promise.race([Promise.all([this.loopDone, ...this.inFlight]), timeout]);
    clearTimeout(bound);
  }

  /** Looks at the queue now rather than at the next poll. */
  wake(): void {
    this.woken = true;
    this.wakeSleeper?.();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      this.woken = false;
      let waitMs = this.pollMs;
      try {
        await this.fill();
        waitMs = await this.untilNextDue();
        if (this.failing) this.opts.logger.info({}, 'the job runner reaches its queue again');
        this.failing = false;
      } catch (err) {
        if (!this.failing)
          this.opts.logger.warn({ err }, `the job runner cannot read its queue; retrying every ${this.pollMs} ms`);
        this.failing = true;
      }
      if (this.woken || this.stopped) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, waitMs);
        this.wakeSleeper = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeSleeper = undefined;
    }
  }

  /** Claims due jobs one at a time while a task has room, and starts each. */
  private async fill(): Promise<void> {
    for (;;) {
      if (this.stopped || this.inFlight.size >= (this.opts.concurrency ?? 5)) return;
      const free = [...this.tasks].filter(([, t]) => t.running < t.concurrency);
      if (free.length === 0) return;
      const { rows } = await this.opts.pool.query<Claimed>(
        `UPDATE jobs SET attempts = attempts + 1, locked_by = $1,
                locked_until = now() + make_interval(secs => l.lease_ms::float8 / 1000)
           FROM unnest($2::text[], $3::int[]) AS l(task, lease_ms)
          WHERE l.task = jobs.task AND jobs.id = (
            SELECT id FROM jobs WHERE task = ANY($2::text[]) AND failed_at IS NULL AND run_at <= now()
               AND (locked_until IS NULL OR locked_until < now())
             ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING jobs.id::text, jobs.task, jobs.job_key, jobs.payload, jobs.attempts, jobs.max_attempts,
                  jobs.period_ms, jobs.revision, jobs.run_at`,
        [this.workerId, free.map(([name]) => name), free.map(([, t]) => t.leaseMs)],
      );
      const job = rows[0];
      if (!job) return;
      const task = this.tasks.get(job.task);
      if (!task) return;
      task.running++;
      const run = this.run(job, task).finally(() => {
        task.running--;
        this.inFlight.delete(run);
        this.wake();
      });
      this.inFlight.add(run);
    }
  }

  /** How long until the next job of these tasks is due (or its lease passes), at most pollMs. */
  private async untilNextDue(): Promise<number> {
    const { rows } = await this.opts.pool.query<{ ms: number | null }>(
      `SELECT (extract(epoch FROM min(greatest(run_at, coalesce(locked_until, run_at))) - now()) * 1000)::float8 AS ms
         FROM jobs WHERE task = ANY($1::text[]) AND failed_at IS NULL`,
      [[...this.tasks.keys()]],
    );
    const ms = rows[0]?.ms;
    return ms === null || ms === undefined ? this.pollMs : Math.min(this.pollMs, Math.max(5, Math.ceil(ms) + 5));
  }

  private async run(job: Claimed, task: Task): Promise<void> {
    const controller = new AbortController();
    this.abort.add(controller);
    const context: JobContext = {
      jobId: job.id,
      task: job.task,
      key: job.job_key,
      payload: job.payload,
      attempt: job.attempts,
      scheduledAt: job.run_at,
      signal: controller.signal,
    };
    // The claim is extended while the handler runs: only a crashed or stuck instance loses it.
    let lease: NodeJS.Timeout | undefined;
    const extend = () => {
      lease = setTimeout(() => {
        this.opts.pool
          .query(
            `UPDATE jobs SET locked_until = now() + make_interval(secs => $3::float8 / 1000)
              WHERE id = $1 AND locked_by = $2`,
            [job.id, this.workerId, task.leaseMs],
          )
          .catch(() => {})
          .finally(() => {
            if (lease !== undefined) extend();
          });
      }, task.leaseMs / 3);
      lease.unref();
    };
    extend();
    try {
      if (job.max_attempts !== null && job.attempts > job.max_attempts) {
        // Its last attempt's instance died holding it.
        throw new Error(`the job's last attempt (${job.max_attempts}) ended without an answer`);
      }
      const outcome = (await task.handler(context)) as JobOutcome;
      clearTimeout(lease);
      lease = undefined;
      await this.succeeded(job, outcome);
    } catch (error) {
      clearTimeout(lease);
      lease = undefined;
      await this.failed(job, task, context, error).catch((err) =>
        this.opts.logger.warn({ err, task: job.task, jobId: job.id }, 'a failed job could not be rescheduled'),
      );
    } finally {
      clearTimeout(lease);
      lease = undefined;
      this.abort.delete(controller);
    }
  }

  private async succeeded(job: Claimed, outcome: JobOutcome): Promise<void> {
    const pool = this.opts.pool;
    if (outcome && typeof outcome.rerunInMs === 'number') {
      await pool.query(
        `UPDATE jobs SET run_at = now() + make_interval(secs => $3::float8 / 1000), attempts = 0,
                locked_by = NULL, locked_until = NULL, last_error = NULL
          WHERE id = $1 AND locked_by = $2`,
        [job.id, this.workerId, outcome.rerunInMs],
      );
    } else if (job.period_ms !== null) {
      // The first slot of the period after now: runs missed while every instance was away are not made up.
      await pool.query(
        `UPDATE jobs SET run_at = run_at + make_interval(secs => period_ms::float8 / 1000
                  * (floor(greatest(extract(epoch FROM now() - run_at) * 1000, 0) / period_ms) + 1)),
                attempts = 0, locked_by = NULL, locked_until = NULL, last_error = NULL
          WHERE id = $1 AND locked_by = $2`,
        [job.id, this.workerId],
      );
    } else {
      const done = await pool.query('DELETE FROM jobs WHERE id = $1 AND locked_by = $2 AND revision = $3', [
        job.id,
        this.workerId,
        job.revision,
      ]);
      if (done.rowCount === 0) {
        // Enqueued again while it ran: the newer request waits for its own run.
        await pool.query(
          'UPDATE jobs SET attempts = 0, locked_by = NULL, locked_until = NULL WHERE id = $1 AND locked_by = $2',
          [job.id, this.workerId],
        );
      }
    }
  }

  private async failed(job: Claimed, task: Task, context: JobContext, error: unknown): Promise<void> {
    const message = error instanceof Error ? error.message : String(error);
    const delay = backoffDelay(job.attempts - 1, task.backoff);
    const last = job.period_ms === null && job.max_attempts !== null && job.attempts >= job.max_attempts;
    const { rowCount } = await this.opts.pool.query(
      `UPDATE jobs SET locked_by = NULL, locked_until = NULL, last_error = $3,
              failed_at = CASE WHEN $4 THEN now() END,
              run_at = now() + make_interval(secs => $5::float8 / 1000)
        WHERE id = $1 AND locked_by = $2`,
      [job.id, this.workerId, message, last, job.period_ms === null ? delay : Math.min(delay, job.period_ms)],
    );
    this.opts.logger.warn(
      {
        err: error,
        task: job.task,
        jobId: job.id,
        key: job.job_key,
        attempt: job.attempts,
        retryInMs: last ? null : delay,
      },
      last ? 'job failed its last attempt' : 'job failed; retrying',
    );
    if (last && rowCount === 1) await task.onFailed?.(context, error);
  }
}
