import type pg from 'pg';
import { Counter, Gauge, type Registry } from 'prom-client';

/**
 * Merge metrics, counted from the database when scraped (like onto_version_vector_spread), so
 * every replica reports the same totals: merges by status, conflicts by type, and the conflict
 * rate per target world (merges that found conflicts / merges whose plans were all in), which
 * the OntoMergeConflictRate alert reads.
 */
export function mergeMetrics(registry: Registry, pool: pg.Pool): void {
  new Counter({
    name: 'onto_merges_total',
    help: 'Merges of worlds by status (RUNNING, CONFLICTS, PROPOSED, MERGED, FAILED, COMPENSATED)',
    labelNames: ['status'] as const,
    registers: [registry],
    async collect() {
      const { rows } = await pool.query<{ status: string; n: number }>(
        'SELECT status, count(*)::int AS n FROM merges GROUP BY status',
      );
      this.reset();
      for (const r of rows) this.inc({ status: r.status }, r.n);
    },
  });
  new Counter({
    name: 'onto_merge_conflicts_total',
    help: 'Conflicts merges found, by type (MODIFY_MODIFY, MODIFY_DELETE, SCHEMA_CONFLICT, RULE_CONFLICT)',
    labelNames: ['type'] as const,
    registers: [registry],
    async collect() {
      const { rows } = await pool.query<{ type: string; n: number }>(
        'SELECT type, count(*)::int AS n FROM merge_conflicts GROUP BY type',
      );
      this.reset();
      for (const r of rows) this.inc({ type: r.type }, r.n);
    },
  });
  new Gauge({
    name: 'onto_merge_conflict_rate',
    help: 'Per target world: merges that found at least one conflict / merges whose plans were all in',
    labelNames: ['world'] as const,
    registers: [registry],
    async collect() {
      const { rows } = await pool.query<{ world: string; planned: number; conflicted: number }>(
        `SELECT target AS world, count(*)::int AS planned,
                count(*) FILTER (WHERE EXISTS (SELECT 1 FROM merge_conflicts c WHERE c.merge_id = m.id))::int AS conflicted
           FROM merges m WHERE planned_at IS NOT NULL GROUP BY target`,
      );
      this.reset();
      for (const r of rows) this.set({ world: r.world }, r.conflicted / r.planned);
    },
  });
}
