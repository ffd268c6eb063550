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
