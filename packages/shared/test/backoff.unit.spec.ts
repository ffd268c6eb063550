import { describe, expect, it } from 'vitest';
import { backoffDelay, equalJitter, retryWithBackoff } from '../src/backoff.js';

describe('backoffDelay', () => {
  it('doubles from the initial wait and stops at the cap', () => {
    const waits = [0, 1, 2, 3, 4, 5, 6].map((attempt) => backoffDelay(attempt, { initialMs: 100, maxMs: 2000 }));
    expect(waits).toEqual([100, 200, 400, 800, 1600, 2000, 2000]);
  });

  it('grows by the factor asked for, and a cap equal to the start keeps the wait fixed', () => {
    expect(backoffDelay(2, { initialMs: 10, maxMs: 10_000, factor: 3 })).toBe(90);
    expect([0, 5, 50].map((attempt) => backoffDelay(attempt, { initialMs: 500, maxMs: 500 }))).toEqual([500, 500, 500]);
  });
});

describe('equalJitter', () => {
  it('keeps half the wait and draws the other half', () => {
    expect(equalJitter(200, () => 0)).toBe(100);
    expect(equalJitter(200, () => 1)).toBe(200);
    expect(equalJitter(200, () => 0.5)).toBe(150);
  });
});

describe('retryWithBackoff', () => {
  const recordSleeps = () => {
    const waits: number[] = [];
    return { waits, sleep: async (ms: number) => void waits.push(ms) };
  };

  it('retries every failure with the growing wait until the work succeeds', async () => {
    const { waits, sleep } = recordSleeps();
    const seen: number[] = [];
    const result = await retryWithBackoff(
      async (attempt) => {
        seen.push(attempt);
        if (attempt < 3) throw new Error(`failure ${attempt}`);
        return 'done';
      },
      { initialMs: 100, maxMs: 300, sleep },
    );
    expect(result).toBe('done');
    expect(seen).toEqual([0, 1, 2, 3]);
    expect(waits).toEqual([100, 200, 300]);
  });

  it('throws at once a failure retryIf refuses, and the last one once maxRetries are spent', async () => {
    const fatal = new Error('fatal');
    const { waits, sleep } = recordSleeps();
    await expect(
      retryWithBackoff(
        async () => {
          throw fatal;
        },
        { initialMs: 1, maxMs: 1, retryIf: (error) => error !== fatal, sleep },
      ),
    ).rejects.toBe(fatal);
    expect(waits).toEqual([]);

    let calls = 0;
    const error = await retryWithBackoff(
      async () => {
        calls++;
        throw new Error(`failure ${calls}`);
      },
      { initialMs: 10, maxMs: 1000, maxRetries: 2, sleep },
    ).catch((e: unknown) => e);
    expect(calls).toBe(3);
    expect((error as Error).message).toBe('failure 3');
    expect(waits).toEqual([10, 20]);
  });

  it('tells onRetry the failure, the attempt and the jittered wait before sleeping it', async () => {
    const events: string[] = [];
    await retryWithBackoff(
      async (attempt) => {
        if (attempt < 2) throw new Error(`failure ${attempt}`);
      },
      {
        initialMs: 100,
        maxMs: 1000,
        jitter: (delay) => delay / 4,
        onRetry: (error, attempt, delay) => void events.push(`${(error as Error).message} #${attempt} ${delay}`),
        sleep: async (ms) => void events.push(`sleep ${ms}`),
      },
    );
    expect(events).toEqual(['failure 0 #0 25', 'sleep 25', 'failure 1 #1 50', 'sleep 50']);
  });

  it('makes no further attempt once stopped, and answers undefined', async () => {
    let stopped = false;
    let calls = 0;
    const result = await retryWithBackoff(
      async () => {
        calls++;
        throw new Error('down');
      },
      {
        initialMs: 1,
        maxMs: 1,
        stopped: () => stopped,
        sleep: async () => {
          stopped = calls >= 2;
        },
      },
    );
    expect(result).toBeUndefined();
    expect(calls).toBe(2);
  });
});
