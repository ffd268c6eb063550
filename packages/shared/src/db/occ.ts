import { equalJitter, retryWithBackoff } from '../backoff.js';

/** The last attempt of an optimistic write still found the data changed under it. */
export class ConcurrencyConflictError extends Error {
  override readonly name = 'ConcurrencyConflictError';
  constructor(
    readonly attempts: number,
    options?: { cause?: unknown },
  ) {
    super(`concurrency conflict persisted after ${attempts} attempts`, options);
  }
}

/** Thrown by an attempt whose expected version or hash no longer holds; triggers a retry. */
export class StaleWriteError extends Error {
  override readonly name = 'StaleWriteError';
}

const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']); // serialization failure, deadlock

export function isConflict(error: unknown): boolean {
  if (error instanceof StaleWriteError) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && RETRYABLE_SQLSTATES.has(code);
}

export interface OccOptions {
  /** Retries after the first attempt. */
  maxRetries?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
}

/**
 * Runs `attempt` until it succeeds, retrying conflicts (StaleWriteError, serialization failures,
 * deadlocks) after baseDelay · 2^n with equal jitter; after the last retry throws
 * ConcurrencyConflictError with the final conflict as its cause. Other errors pass through.
 */
export async function withOcc<T>(attempt: (n: number) => Promise<T>, options: OccOptions = {}): Promise<T> {
  const maxRetries = options.maxRetries ?? 5;
  const random = options.random ?? Math.random;
  try {
    return await retryWithBackoff(attempt, {
      initialMs: options.baseDelayMs ?? 100,
      maxMs: options.maxDelayMs ?? 5000,
      maxRetries,
      retryIf: isConflict,
      jitter: (delayMs) => equalJitter(delayMs, random),
      ...(options.sleep ? { sleep: options.sleep } : {}),
    });
  } catch (error) {
    // A conflict leaves the retry only once the retries are spent.
    if (isConflict(error)) throw new ConcurrencyConflictError(maxRetries + 1, { cause: error });
    throw error;
  }
}
