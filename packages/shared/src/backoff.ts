/** How a wait grows between attempts: `initialMs · factor^attempt`, never more than `maxMs`. */
export interface Backoff {
  initialMs: number;
  maxMs: number;
  /** Growth per attempt; 2 unless said. */
  factor?: number;
}

/** The wait before retry `attempt` (0 for the first): `initialMs · factor^attempt`, capped at `maxMs`. */
export function backoffDelay(attempt: number, backoff: Backoff): number {
  return Math.min(backoff.initialMs * (backoff.factor ?? 2) ** attempt, backoff.maxMs);
}

/** Equal jitter: half the wait fixed, half random, so that writers that collided do not collide again. */
export const equalJitter = (delayMs: number, random: () => number = Math.random): number =>
  delayMs / 2 + random() * (delayMs / 2);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface RetryOptions extends Backoff {
  /** Whether a failure is worth another attempt; any other is thrown at once. Every failure unless said. */
  retryIf?: (error: unknown, attempt: number) => boolean;
  /** Retries after the first attempt; then the last failure is thrown. Unbounded unless said. */
  maxRetries?: number;
  /** Checked before every attempt: once true, no more attempts and the retry resolves undefined. */
  stopped?: () => boolean;
  /** Called (and awaited) after a failure that will be retried, before the wait: log it, clean up. */
  onRetry?: (error: unknown, attempt: number, delayMs: number) => void | Promise<void>;
  /** Turns the backoff's wait into the one slept; the wait itself unless said. */
  jitter?: (delayMs: number) => number;
  sleep?: (ms: number) => Promise<void>;
}

/**
 * Runs `work(attempt)` until it succeeds, waiting `backoffDelay(attempt)` (jittered if asked)
 * after each failure that `retryIf` accepts, at most `maxRetries` times.
 */
export function retryWithBackoff<T>(
  work: (attempt: number) => Promise<T>,
  options: RetryOptions & { stopped: () => boolean },
): Promise<T | undefined>;
export function retryWithBackoff<T>(
  work: (attempt: number) => Promise<T>,
  options: RetryOptions & { stopped?: undefined },
): Promise<T>;
export async function retryWithBackoff<T>(
  work: (attempt: number) => Promise<T>,
  options: RetryOptions,
): Promise<T | undefined> {
  const maxRetries = options.maxRetries ?? Number.POSITIVE_INFINITY;
  for (let attempt = 0; ; attempt++) {
    if (options.stopped?.()) return undefined;
    try {
      return await work(attempt);
    } catch (error) {
      if (attempt >= maxRetries || !(options.retryIf?.(error, attempt) ?? true)) throw error;
      const delay = backoffDelay(attempt, options);
      const wait = options.jitter ? options.jitter(delay) : delay;
      await options.onRetry?.(error, attempt, wait);
      await (options.sleep ?? sleep)(wait);
    }
  }
}
