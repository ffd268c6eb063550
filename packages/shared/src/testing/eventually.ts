import { setTimeout as sleep } from 'node:timers/promises';

export interface EventuallyOptions {
  /** How long to keep asking before failing; 20 s unless told. */
  timeoutMs?: number;
  /** The pause between two probes. */
  intervalMs?: number;
}

/** What a probe returns while the condition does not hold yet. */
type NotYet = undefined | null | false;

/**
 * Asks `probe` until it answers something other than undefined, null or false, and returns that
 * answer; after the timeout, fails naming `what` (a function is asked then, for the latest state).
 * The one way tests wait: for a condition, not for a time.
 */
export async function eventually<T>(
  what: string | (() => string),
  probe: () => T | Promise<T>,
  { timeoutMs = 20_000, intervalMs = 25 }: EventuallyOptions = {},
): Promise<Exclude<T, NotYet>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const answer = await probe();
    if (answer !== undefined && answer !== null && answer !== false) return answer as Exclude<T, NotYet>;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    await sleep(intervalMs);
  }
}
