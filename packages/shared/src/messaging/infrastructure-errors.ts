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
]);

/** Failures of the platform rather than of the event: retried without counting an attempt. */
export function isInfrastructureError(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown; name?: unknown } | null;
  if (typeof e?.code === 'string' && INFRASTRUCTURE_CODES.has(e.code)) return true;
  const message = typeof e?.message === 'string' ? e.message : '';
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    message,
  );
}
