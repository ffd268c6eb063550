import type { Logger } from 'pino';
import { equalJitter, retryWithBackoff } from './backoff.js';
import type { IncomingBatch } from './kafka/broker.js';

const INFRASTRUCTURE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  '57P01', // admin shutdown
  '57P02',
  '57P03', // cannot connect now
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '53300', // too many connections
  // Failures of the moment, not of the event: the same transaction succeeds when run again.
  '40P01', // deadlock detected
  '40001', // serialization failure
  '55P03', // lock not available (lock_timeout)
  '57014', // query canceled (statement_timeout, pg_cancel_backend)
]);

/**
 * Failures of the platform or of the moment rather than of the event (PostgreSQL away, a
 * deadlock, a lock or statement timeout): retried with backoff for as long as they last, without
 * counting an attempt, so that only an event that fails deterministically is dead-lettered.
 */
export function isInfrastructureError(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown; name?: unknown } | null;
  if (typeof e?.code === 'string' && INFRASTRUCTURE_CODES.has(e.code)) return true;
  const message = typeof e?.message === 'string' ? e.message : '';
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    message,
  );
}

/**
 * Retries work that failed for infrastructure reasons (PostgreSQL or Kafka away, a deadlock, a
 * lock or statement timeout) with jittered backoff until it settles, for as long as it takes.
 */
export async function untilSettled(batch: IncomingBatch, log: Logger, work: () => Promise<void>): Promise<void> {
  await retryWithBackoff(work, {
    initialMs: 100,
    maxMs: 5000,
    jitter: equalJitter,
    retryIf: (error) => isInfrastructureError(error) && batch.isRunning(),
    onRetry: async (error, _attempt, delayMs) => {
      log.warn({ err: error, retryInMs: delayMs }, 'infrastructure unavailable or contended; retrying');
      await batch.heartbeat().catch(() => {});
    },
  });
}
