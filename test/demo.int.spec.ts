import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../services/control/test/control-service.js';
import { type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/** scripts/demo.mjs, which `./onto up` runs, against the three services listening on free ports. */

const DEMO = fileURLToPath(new URL('../scripts/demo.mjs', import.meta.url));

describe('the demo script', () => {
  let s: IntelligenceStack;
  let env: Record<string, string>;

  /** Runs the demo as `./onto up` does, in a child process (the services answer from this one). */
  const demo = async () => {
    try {
      const { stdout, stderr } = await promisify(execFile)(process.execPath, [DEMO], {
        env: { ...process.env, ...env },
        timeout: 240_000,
      });
      return { code: 0, stdout, stderr };
    } catch (err) {
      const failed = err as { code?: number; stdout?: string; stderr?: string };
      return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
    }
  };

  beforeAll(async () => {
    const pool = { DB_POOL_MAX: '5' };
    s = await intelligenceStack({ partitions: 1, controlEnv: pool, dataEnv: pool, intelligenceEnv: pool });
    const [control, data, intelligence] = await Promise.all(
      [s.control.app, s.data.app, s.intelligence?.app].map((app) =>
        (app as NonNullable<typeof app>).listen({ port: 0, host: '127.0.0.1' }),
      ),
    );
    env = {
      ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
      ONTO_CONTROL_URL: control as string,
      ONTO_DATA_URL: data as string,
      ONTO_INTELLIGENCE_URL: intelligence as string,
    };
    await s.identityKnown();
  }, 120_000);
  afterAll(async () => {
    await s?.close();
  });

  it('tags demo, forks staging at the tag, cancels an order there only, and prints the diff; again, it changes nothing', async () => {
    const first = await demo();
    expect(first.code, `${first.stdout}\n${first.stderr}`).toBe(0);
    const tag = /^demo tag: v1 of demo names schema version \d+, data commit (\d+), intelligence watermark \d+$/m.exec(
      first.stdout,
    );
    expect(tag, first.stdout).not.toBeNull();
    expect(first.stdout).toMatch(
      new RegExp(`^demo fork: staging forked from demo at v1 \\(commit ${tag?.[1]}\\); o-1 is open in demo;`, 'm'),
    );
    expect(first.stdout).toContain('  modified Order o-1 (in staging): status "open" → "cancelled"');

    const staging = await s.dataCall('GET', '/v1/worlds/staging/objects/Order/o-1');
    expect(staging.json().properties.status).toBe('cancelled');
    // Then merged back: o-1 cancelled in demo too; o-2's amount, changed on both sides, stopped a
    // MANUAL merge at a conflict resolved by a value (the old amount + 15).
    const demoWorld = await s.dataCall('GET', '/v1/worlds/demo/objects/Order/o-1');
    expect(demoWorld.json().properties.status).toBe('cancelled');
    expect(first.stdout).toMatch(
      /^demo merge: staging into demo \(SOURCE_WINS\) MERGED, base demo at data commit \d+; o-1 is cancelled in demo$/m,
    );
    expect(first.stdout).toMatch(
      /^demo merge: staging into demo \(MANUAL\) stopped at CONFLICTS:\n {2}d-\d+ MODIFY_MODIFY Order o-2\.amount: base (\d+), staging \d+, demo \d+$/m,
    );
    const amount = async () => (await s.dataCall('GET', '/v1/worlds/demo/objects/Order/o-2')).json().properties.amount;
    const before = Number(/MODIFY_MODIFY Order o-2\.amount: base (\d+)/.exec(first.stdout)?.[1]);
    expect(await amount()).toBe(before + 15);

    // `./onto up` runs the demo on every start: a second run finds both worlds, merges again with
    // nothing settled twice (it keeps the target's own changes, such as the demo putting its orders back), and makes and resolves a fresh conflict.
    const again = await demo();
    expect(again.code, `${again.stdout}\n${again.stderr}`).toBe(0);
    expect(again.stdout).toMatch(/\(MANUAL\) stopped at CONFLICTS:\n {2}d-\d+ MODIFY_MODIFY Order o-2\.amount/);
    expect(await amount()).toBe(before + 15);
  }, 480_000);
});
