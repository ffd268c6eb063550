import { afterEach, describe, expect, it, vi } from 'vitest';
import { everyInProcess } from '../src/in-process.js';

describe('everyInProcess', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('never overlaps rounds, logs a failure once per streak, and stops for good', async () => {
    vi.useFakeTimers();
    const warnings: string[] = [];
    const infos: string[] = [];
    let running = 0;
    let most = 0;
    let rounds = 0;
    const outcomes = [true, false, false, true, true];
    const task = everyInProcess(
      'the task',
      10,
      async () => {
        running++;
        most = Math.max(most, running);
        rounds++;
        // A round longer than the period: the next is timed from its end.
        await new Promise((r) => setTimeout(r, 25));
        running--;
        if (outcomes[rounds - 1] === false) throw new Error('no');
      },
      { warn: (_obj, msg) => warnings.push(msg), info: (msg) => infos.push(msg) },
    );
    expect(rounds).toBe(0); // the first round waits a period
    await vi.advanceTimersByTimeAsync(5 * 35);
    expect(rounds).toBe(5);
    expect(most).toBe(1);
    expect(warnings).toEqual(['the task failed; trying again every 10 ms']);
    expect(infos).toEqual(['the task works again']);
    task.stop();
    await vi.advanceTimersByTimeAsync(200);
    expect(rounds).toBe(5);
  });
});
