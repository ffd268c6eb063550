import type pg from 'pg';
import { Counter, Gauge, type Registry } from 'prom-client';

/**
 * Merge metrics, counted from the database when scraped (like onto_version_vector_spread), so
 * every replica reports the same totals: merges by status, conflicts by type, and the conflict
 * rate (merges that found conflicts / merges whose plans were all in).
 */
export function mergeMetrics(registry: Registry, pool: pg.Pool): void {
  new Counter({
    name: 'onto_merges_total',
    help: 'Merges of worlds by status (RUNNING, CONFLICTS, MERGED, FAILED, COMPENSATED)',
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
    help: 'Merges that found at least one conflict / merges whose plans were all in (0 before the first)',
    registers: [registry],
    async collect() {
      const { rows } = await pool.query<{ planned: number; conflicted: number }>(
        `SELECT count(*)::int AS planned,
                count(*) FILTER (WHERE EXISTS (SELECT 1 FROM merge_conflicts c WHERE c.merge_id = m.id))::int AS conflicted
           FROM merges m WHERE planned_at IS NOT NULL`,
      );
      const { planned, conflicted } = rows[0] ?? { planned: 0, conflicted: 0 };
      this.set(planned === 0 ? 0 : conflicted / planned);
    },
  });
}
