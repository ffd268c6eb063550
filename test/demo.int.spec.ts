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
    const demoWorld = await s.dataCall('GET', '/v1/worlds/demo/objects/Order/o-1');
    expect(demoWorld.json().properties.status).toBe('open');

    // `./onto up` runs the demo on every start: a second run finds both worlds and succeeds.
    const again = await demo();
    expect(again.code, `${again.stdout}\n${again.stderr}`).toBe(0);
    expect(again.stdout).toContain('  modified Order o-1 (in staging): status "open" → "cancelled"');
  }, 480_000);
});
