import type pg from 'pg';
import { Counter, Gauge, type Registry } from 'prom-client';

export type Outcome = 'applied' | 'duplicate' | 'parked' | 'dead_lettered';

/** One metric per registry, shared by every consumer registered on it. */
function reuse<M>(registry: Registry | undefined, name: string, create: () => M): M {
  return (registry?.getSingleMetric(name) as M | undefined) ?? create();
}

/** A counter of this name on the registry: the one already there, or a new one. */
function sharedCounter<L extends string>(
  registry: Registry | undefined,
  config: { name: string; help: string; labelNames: readonly L[] },
): Counter<L> {
  return reuse(registry, config.name, () => new Counter({ ...config, registers: registry ? [registry] : [] }));
}

/** An inbox consumer's counters, labelled with its name; the parked-events gauge of its database. */
export class ConsumerMetrics {
  private readonly events: Counter<'consumer' | 'outcome'>;
  private readonly duplicates: Counter<'consumer' | 'detected_by'>;
  private readonly redisFallbacks: Counter<'consumer'>;

  constructor(
    private readonly consumer: string,
    registry: Registry | undefined,
    pool: pg.Pool,
  ) {
    const registers = registry ? [registry] : [];
    this.events = sharedCounter(registry, {
      name: 'onto_inbox_events_total',
      help: 'Events handled by an inbox consumer, by outcome',
      labelNames: ['consumer', 'outcome'] as const,
    });
    this.duplicates = sharedCounter(registry, {
      name: 'onto_inbox_duplicates_total',
      help: 'Redelivered events skipped (idempotency hits), by what detected them',
      labelNames: ['consumer', 'detected_by'] as const,
    });
    this.redisFallbacks = sharedCounter(registry, {
      name: 'onto_inbox_redis_fallbacks_total',
      help: 'Batches that went to the PostgreSQL inbox alone because Redis did not answer',
      labelNames: ['consumer'] as const,
    });
    reuse(
      registry,
      'onto_inbox_deferred',
      () =>
        new Gauge({
          name: 'onto_inbox_deferred',
          help: 'Events parked until their cause is handled, by consumer',
          labelNames: ['consumer'] as const,
          registers,
          async collect() {
            const { rows } = await pool.query<{ consumer: string; n: number }>(
              'SELECT consumer, count(*)::int AS n FROM inbox_deferred GROUP BY consumer',
            );
            this.reset();
            for (const r of rows) this.set({ consumer: r.consumer }, r.n);
          },
        }),
    );
  }

  count(outcome: Outcome, n = 1): void {
    if (n > 0) this.events.inc({ consumer: this.consumer, outcome }, n);
  }

  /** Duplicates skipped, counted by what detected them and as outcomes. */
  duplicate(detectedBy: 'redis' | 'postgres', n: number): void {
    if (n <= 0) return;
    this.duplicates.inc({ consumer: this.consumer, detected_by: detectedBy }, n);
    this.count('duplicate', n);
  }

  redisFallback(): void {
    this.redisFallbacks.inc({ consumer: this.consumer });
  }
}
