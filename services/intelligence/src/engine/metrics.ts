import type pg from 'pg';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EvaluationStats } from './evaluation.js';

/**
 * What evaluation reports to Prometheus. Staleness per derived property: how far its values
 * lag what they read — the age of the oldest recompute still pending for it (a new definition,
 * a schema change), else how long after the data change its latest recompute landed.
 */
export class EvaluationMetrics {
  private readonly lastDelay = new Map<string, { world: string; property: string; seconds: number }>();
  private readonly values: Counter<'outcome'>;
  private readonly alerts: Counter<'event'>;
  private readonly ruleErrors: Counter;
  private readonly decisions: Counter;

  constructor(registry: Registry, pool: pg.Pool) {
    const registers = [registry];
    const lastDelay = this.lastDelay;
    new Gauge({
      name: 'onto_derived_staleness_seconds',
      help: 'How far a derived property lags its inputs: the oldest pending recompute, else the delay of the latest one',
      labelNames: ['world', 'property'] as const,
      registers,
      async collect() {
        const { rows } = await pool.query<{ world: string; property: string; pending: number | null }>(
          `SELECT d.world_id AS world, d.name AS property,
                  extract(epoch FROM clock_timestamp() - min(j.created_at))::float8 AS pending
             FROM derived_definitions d
             LEFT JOIN recompute_jobs j
               ON j.world_id = d.world_id AND j.kind = 'derived' AND j.name = d.name AND j.finished_at IS NULL
            GROUP BY d.world_id, d.name`,
        );
        this.reset();
        for (const r of rows) {
          const delay = lastDelay.get(`${r.world}\u0000${r.property}`)?.seconds ?? 0;
          this.set({ world: r.world, property: r.property }, Math.max(r.pending ?? 0, delay));
        }
      },
    });
    new Gauge({
      name: 'onto_derived_max_staleness_seconds',
      help: "A derived property's declared maximum staleness, to compare onto_derived_staleness_seconds with",
      labelNames: ['world', 'property'] as const,
      registers,
      async collect() {
        const { rows } = await pool.query<{ world: string; property: string; ms: number }>(
          'SELECT world_id AS world, name AS property, max_staleness_ms AS ms FROM derived_definitions',
        );
        this.reset();
        for (const r of rows) this.set({ world: r.world, property: r.property }, r.ms / 1000);
      },
    });
    this.values = new Counter({
      name: 'onto_derived_values_computed_total',
      help: 'Derived values computed, by whether the value changed',
      labelNames: ['outcome'] as const,
      registers,
    });
    this.alerts = new Counter({
      name: 'onto_alerts_total',
      help: 'Alerts raised and cleared',
      labelNames: ['event'] as const,
      registers,
    });
    this.ruleErrors = new Counter({
      name: 'onto_rule_evaluation_errors_total',
      help: 'Rule conditions that failed to evaluate (the alert state is left as it was)',
      registers,
    });
    this.decisions = new Counter({ name: 'onto_decisions_total', help: 'Decisions made', registers });
  }

  /** After a committed evaluation: `since` is when the oldest data change it reflects happened. */
  record(world: string, stats: EvaluationStats, since?: number) {
    if (stats.values > 0) {
      this.values.inc({ outcome: 'changed' }, stats.changed);
      this.values.inc({ outcome: 'unchanged' }, stats.values - stats.changed);
    }
    if (stats.raised > 0) this.alerts.inc({ event: 'raised' }, stats.raised);
    if (stats.cleared > 0) this.alerts.inc({ event: 'cleared' }, stats.cleared);
    if (stats.ruleErrors > 0) this.ruleErrors.inc(stats.ruleErrors);
    if (stats.decisions > 0) this.decisions.inc(stats.decisions);
    if (since !== undefined) {
      const seconds = Math.max(0, (Date.now() - since) / 1000);
      for (const property of stats.definitions) {
        this.lastDelay.set(`${world}\u0000${property}`, { world, property, seconds });
      }
    }
  }

  forget(world: string, property?: string) {
    for (const [key, v] of this.lastDelay) {
      if (v.world === world && (property === undefined || v.property === property)) this.lastDelay.delete(key);
    }
  }
}
