import type pg from 'pg';
import { Counter, Gauge, type Registry } from 'prom-client';
import { ACTION_STATUSES } from './repository.js';

export const IDEMPOTENCY_OUTCOMES = ['executed', 'replayed', 'mismatch', 'in_progress'] as const;
export type IdempotencyOutcome = (typeof IDEMPOTENCY_OUTCOMES)[number];

/**
 * Idempotency-key outcomes of POST /actions (the hit rate of the design's §16 is replayed over
 * all: normally below 1 %, alarming above 10 %), and actions by status, counted at scrape time.
 */
export function actionMetrics(registry: Registry, pool: pg.Pool) {
  const requests = new Counter({
    name: 'onto_idempotency_requests_total',
    help: 'Action requests by what their Idempotency-Key did: executed, replayed, mismatch (422), in_progress (409)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  for (const outcome of IDEMPOTENCY_OUTCOMES) requests.inc({ outcome }, 0);
  new Gauge({
    name: 'onto_actions',
    help: 'Actions by status',
    labelNames: ['status'] as const,
    registers: [registry],
    async collect() {
      const { rows } = await pool.query<{ status: string; n: number }>(
        'SELECT status, count(*)::int AS n FROM actions GROUP BY status',
      );
      for (const status of ACTION_STATUSES) this.set({ status }, rows.find((r) => r.status === status)?.n ?? 0);
    },
  });
  return { request: (outcome: IdempotencyOutcome) => requests.inc({ outcome }) };
}
