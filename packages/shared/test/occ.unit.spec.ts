import { describe, expect, it } from 'vitest';
import { ConcurrencyConflictError, StaleWriteError, withOcc } from '../src/db/occ.js';

describe('withOcc', () => {
  it('retries conflicts with exponential backoff and jitter, then succeeds', async () => {
    const delays: number[] = [];
    let calls = 0;
    const result = await withOcc(
      async () => {
        calls++;
        if (calls < 4) throw new StaleWriteError('stale');
        return 'ok';
      },
      { sleep: async (ms) => void delays.push(ms), random: () => 1 },
    );
    expect(result).toBe('ok');
    expect(delays).toEqual([100, 200, 400]);
  });

  it('keeps the jitter within [ceiling/2, ceiling]', async () => {
    const delays: number[] = [];
    await expect(
      withOcc(
        async () => {
          throw Object.assign(new Error('could not serialize access'), { code: '40001' });
        },
        { maxRetries: 3, sleep: async (ms) => void delays.push(ms), random: () => 0 },
      ),
    ).rejects.toBeInstanceOf(ConcurrencyConflictError);
    expect(delays).toEqual([50, 100, 200]);
  });

  it('raises a typed conflict error after the last attempt, with the last conflict as cause', async () => {
    const last = new StaleWriteError('expected hash abc');
    const error = await withOcc(
      async () => {
        throw last;
      },
      { maxRetries: 2, sleep: async () => {} },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConcurrencyConflictError);
    expect((error as ConcurrencyConflictError).attempts).toBe(3);
    expect((error as Error).cause).toBe(last);
  });

  it('lets other errors through at once', async () => {
    let calls = 0;
    await expect(
      withOcc(async () => {
        calls++;
        throw new TypeError('bug');
      }),
    ).rejects.toBeInstanceOf(TypeError);
    expect(calls).toBe(1);
  });
});
