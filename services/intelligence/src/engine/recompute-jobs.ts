/**
 * Recomputing a definition for every existing object of its type — after it is defined or
 * changed, or a schema change affects it — in bounded batches, each its own short transaction
 * under the world's lock, so that a big world never holds one giant transaction and the change
 * consumer keeps flowing between batches (docs/adr/0010).
 */
import { enqueueJob, inTransactionTogether, type JobRunner, type Queryable, type Statement } from '@onto/shared';
import type pg from 'pg';
import { Evaluation, type EvaluationContext } from './evaluation.js';
import { lockWorldsStatement } from './locks.js';
import type { EvaluationMetrics } from './metrics.js';
import { ModelCache } from './world-model.js';
import { WriteBehind } from './write-behind.js';

export interface JobRequest {
  worldId: string;
  kind: 'derived' | 'rule';
  name: string;
  definitionVersion: number;
  objectType: string;
  /** Jobs are taken earliest due first: created + the definition's max staleness. */
  dueInMs: number;
}

/**
 * The job runner's task that works through recompute_jobs (docs/adr/0051): one job for the whole
 * queue, so that batches go earliest due first as they always did, one at a time per deployment.
 */
export const RECOMPUTE = 'intelligence.recompute';

/** Starts a recompute (in the caller's transaction), superseding any unfinished one of the definition. */
export async function requestRecompute(tx: Queryable, job: JobRequest): Promise<void> {
  await finishRecomputes(tx, job.worldId, job.kind, job.name);
  await tx.query(
    `INSERT INTO recompute_jobs (world_id, kind, name, definition_version, object_type, due_at)
     VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::float8 / 1000))`,
    [job.worldId, job.kind, job.name, job.definitionVersion, job.objectType, job.dueInMs],
  );
  await enqueueJob(tx, RECOMPUTE, { key: '', maxAttempts: null });
}

/** Ends the definition's unfinished recomputes (it was deleted, or is recomputed anew). */
export async function finishRecomputes(tx: Queryable, worldId: string, kind: 'derived' | 'rule', name: string) {
  await tx.query(
    `UPDATE recompute_jobs SET finished_at = now()
      WHERE world_id = $1 AND kind = $2 AND name = $3 AND finished_at IS NULL`,
    [worldId, kind, name],
  );
}

export type RecomputeProgress = {
  pending: boolean;
  processed: number;
  requestedAt: string;
  finishedAt: string | null;
};

/** The latest recompute of a definition, for its GET. */
export async function recomputeOf(
  db: Queryable,
  worldId: string,
  kind: 'derived' | 'rule',
  name: string,
): Promise<RecomputeProgress | null> {
  const { rows } = await db.query<RecomputeProgress>(
    `SELECT finished_at IS NULL AS pending, processed::float8 AS processed,
            to_json(created_at)#>>'{}' AS "requestedAt", to_json(finished_at)#>>'{}' AS "finishedAt"
       FROM recompute_jobs WHERE world_id = $1 AND kind = $2 AND name = $3 ORDER BY id DESC LIMIT 1`,
    [worldId, kind, name],
  );
  return rows[0] ?? null;
}

interface Job {
  id: string;
  world_id: string;
  kind: 'derived' | 'rule';
  name: string;
  definition_version: number;
  object_type: string;
  after_pk: string | null;
}

/**
 * A batch of a fork's keys of a type in pk order (docs/adr/0033): its own and its bases' at their
 * fork points, each level's next keys by index, merged; `live` through the chain (a key the fork
 * deleted, or that a base had deleted by its point, is not computed, but the batch moves past it).
 */
const CHAIN_KEYS = `WITH cand AS (
    SELECT DISTINCT x.pk FROM rm_chain($1) c
     CROSS JOIN LATERAL (
       (SELECT r.pk FROM rm_objects r
         WHERE r.world_id = c.world_id AND r.type = $2 AND ($3::text IS NULL OR r.pk > $3)
           AND (c.point IS NULL OR r.seq <= c.point)
         ORDER BY r.pk LIMIT $4)
       UNION ALL
       (SELECT h.pk FROM rm_objects_history h
         WHERE c.point IS NOT NULL AND h.world_id = c.world_id AND h.type = $2 AND ($3::text IS NULL OR h.pk > $3)
           AND h.seq <= c.point AND h.superseded_seq > c.point
         ORDER BY h.pk LIMIT $4)
     ) x
    ORDER BY x.pk LIMIT $4
  )
  SELECT cand.pk, (SELECT pg_column_size(o.properties) FROM rm_object_at($1, $2, cand.pk) o WHERE NOT o.deleted) AS size
    FROM cand ORDER BY cand.pk`;

/** A world's own keys of a type in pk order, with the stored size of each object's properties. */
const OWN_KEYS = `SELECT pk, pg_column_size(properties) AS size FROM rm_objects
   WHERE world_id = $1 AND type = $2 AND NOT deleted AND ($3::text IS NULL OR pk > $3)
   ORDER BY pk LIMIT $4`;

/**
 * Cuts a page of keys (pk, size: null when not live) where the objects' stored sizes add up to
 * $5 bytes, keeping at least one key: the evaluation loads them in one query, whose rows are
 * parsed in one turn of the event loop (docs/adr/0021). `candidates` says whether the page was full.
 */
const sized = (keys: string) => `WITH page AS (${keys}),
  sized AS (SELECT pk, size, row_number() OVER (ORDER BY pk) AS n, count(*) OVER () AS candidates,
                   sum(coalesce(size, 0)) OVER (ORDER BY pk) AS upto FROM page)
  SELECT pk, size IS NOT NULL AS live, candidates::int FROM sized WHERE n = 1 OR upto <= $5 ORDER BY pk`;

/** Takes due recomputes one batch at a time, as the job RECOMPUTE of the service's runner. */
export class RecomputeWorker {
  private jobs: JobRunner | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly models: ModelCache,
    private readonly ctx: EvaluationContext,
    private readonly metrics: EvaluationMetrics,
    private readonly batchSize = 500,
    private readonly retryMs = 250,
    /** At most this many bytes of stored properties a batch (but one object at least). */
    private readonly batchBytes = 256 * 1024,
  ) {}

  /** Defines RECOMPUTE on `jobs`: a batch a run, run again at once while batches are left. */
  register(jobs: JobRunner) {
    this.jobs = jobs;
    jobs.define(
      RECOMPUTE,
      async () => {
        const step = await this.step();
        if (step === 'done') return undefined;
        return { rerunInMs: step === 'more' ? 0 : this.retryMs };
      },
      { backoff: { initialMs: this.retryMs, maxMs: 5000 } },
    );
  }

  /** Looks for work now (a definition was written); the job's enqueue does it too once committed. */
  wake() {
    this.jobs?.wake();
  }

  /**
   * One batch of the most due recompute: `more` when one ran, `done` when none is left, `later`
   * when the most due one cannot run yet (its fork point is not recorded).
   */
  async step(): Promise<'more' | 'done' | 'later'> {
    // Most polls find nothing: one statement outside any transaction says so.
    const due = await this.pool.query<{ id: string; world_id: string }>(
      'SELECT id::text, world_id FROM recompute_jobs WHERE finished_at IS NULL ORDER BY due_at, id LIMIT 1',
    );
    const next = due.rows[0];
    if (!next) return 'done';
    // BEGIN, the world's lock, then the job's row (definition writes take them in that order)
    // and the model's versions, in one trip; the values computed go with COMMIT.
    const first: Statement[] = [
      lockWorldsStatement([next.world_id]) as Statement,
      {
        text: `SELECT id::text, world_id, kind, name, definition_version, object_type, after_pk FROM recompute_jobs
                WHERE world_id = $2 AND id = $1 AND finished_at IS NULL FOR UPDATE`,
        values: [next.id, next.world_id],
      },
      ModelCache.versions(next.world_id),
    ];
    return inTransactionTogether(this.pool, first, async (tx, [, found, versions]) => {
      const job = found?.rows[0] as Job | undefined;
      if (!job) return { value: 'more' as const };
      const model = await this.models.get(tx, job.world_id, versions?.rows);
      const current = job.kind === 'derived' ? model.derivedByName.get(job.name) : model.rules.get(job.name);
      if (!current || current.version !== job.definition_version || current.objectType !== job.object_type) {
        // Superseded, deleted or invalid since: nothing of this job is worth computing.
        return {
          value: 'more' as const,
          last: [
            {
              text: 'UPDATE recompute_jobs SET finished_at = now() WHERE world_id = $2 AND id = $1',
              values: [job.id, job.world_id],
            },
          ],
        };
      }
      const chain = ModelCache.chainOf(versions?.rows);
      if (chain === 'pending') return { value: 'later' as const }; // its fork point is not recorded yet
      const forked = chain === 'known';
      const batch = await tx.query<{ pk: string; live: boolean; candidates: number }>(
        sized(forked ? CHAIN_KEYS : OWN_KEYS),
        [job.world_id, job.object_type, job.after_pk, this.batchSize, this.batchBytes],
      );
      const seen = batch.rows.map((r) => r.pk);
      // Done when the page was not full and no key of it was left for the next batch.
      const last = (batch.rows[0]?.candidates ?? 0) < this.batchSize && seen.length === batch.rows[0]?.candidates;
      const pks = batch.rows.filter((r) => r.live).map((r) => r.pk);
      const sql = new WriteBehind(tx);
      const evaluation = new Evaluation(sql, model, this.ctx, forked);
      if (job.kind === 'derived') evaluation.definitionNeeds(job.name, pks);
      else evaluation.ruleNeeds(job.name, pks);
      const stats = await evaluation.run();
      this.metrics.record(job.world_id, stats);
      const progress: Statement = {
        text: `UPDATE recompute_jobs SET after_pk = coalesce($2, after_pk), processed = processed + $3,
                      finished_at = CASE WHEN $4 THEN now() END
                WHERE world_id = $5 AND id = $1`,
        values: [job.id, seen.at(-1) ?? null, pks.length, seen.length === 0 || last, job.world_id],
      };
      return { value: 'more' as const, last: [...sql.take(), progress] };
    });
  }
}
