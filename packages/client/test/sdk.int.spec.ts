import { execFile } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOTSTRAP } from '../../../services/control/test/control-service.js';
import { type IntelligenceStack, intelligenceStack } from '../../../services/intelligence/test/stack.js';
import { runCli } from '../../admin/test/cli.js';

/**
 * The client generated for the demo world (scripts/demo.mjs), end to end: `onto-admin codegen`
 * writes the module, tsc --strict compiles the typed driver and the file of deliberate type
 * errors, and the driver runs against the three services listening here.
 */
const path = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const ROOT = path('../../../');
const E2E = path('./e2e/');
const GENERATED = path('./e2e/generated/');
const run = promisify(execFile);

describe('@onto/client generated for the demo world', () => {
  let s: IntelligenceStack;
  let urls: string[];

  beforeAll(async () => {
    const pool = { DB_POOL_MAX: '5' };
    s = await intelligenceStack({ partitions: 1, controlEnv: pool, dataEnv: pool, intelligenceEnv: pool });
    urls = (await Promise.all(
      [s.control.app, s.data.app, s.intelligence?.app].map((app) =>
        (app as NonNullable<typeof app>).listen({ port: 0, host: '127.0.0.1' }),
      ),
    )) as string[];
    await s.identityKnown();
    await run(process.execPath, [path('../../../scripts/demo.mjs')], {
      env: {
        ...process.env,
        ONTO_BOOTSTRAP_TOKEN: BOOTSTRAP,
        ONTO_CONTROL_URL: urls[0],
        ONTO_DATA_URL: urls[1],
        ONTO_INTELLIGENCE_URL: urls[2],
      },
      timeout: 240_000,
    });
    await rm(GENERATED, { recursive: true, force: true });
  }, 300_000);
  afterAll(async () => {
    await s?.close();
  });

  it('generates, compiles with tsc --strict (wrong types refused), and drives the stack', async () => {
    const globals = ['--json', '--control-url', urls[0], '--data-url', urls[1], '--intelligence-url', urls[2]];
    const generated = await runCli(
      [...globals, '--api-token', BOOTSTRAP] as string[],
      'codegen',
      '--world',
      'demo',
      '--out',
      GENERATED,
      '--client',
      '../../../src/index.js',
    );
    expect(generated.code, generated.err).toBe(0);
    const summary = generated.json();
    expect(summary).toMatchObject({ world: 'demo', objectTypes: 2, linkTypes: 1, actionTypes: 2 });
    expect(summary.derivedProperties).toBeGreaterThanOrEqual(1);

    // tsc --strict over the driver and the deliberate errors: an unused @ts-expect-error fails it.
    await writeFile(
      `${GENERATED}tsconfig.json`,
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: 'ES2023',
          lib: ['ES2023'],
          types: [],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          noUncheckedIndexedAccess: true,
          skipLibCheck: true,
        },
        files: [`${E2E}drive-demo.ts`, `${E2E}type-errors.ts`],
      }),
    );
    const tsc = await run(process.execPath, [`${ROOT}node_modules/typescript/bin/tsc`, '-p', GENERATED]).catch(
      (err: { stdout?: string }) => ({ stdout: err.stdout ?? String(err), failed: true }),
    );
    expect('failed' in tsc ? tsc.stdout : '').toBe('');
    // Without the @ts-expect-error lines, each is an error of its own.
    const loose = (await import('node:fs'))
      .readFileSync(`${E2E}type-errors.ts`, 'utf8')
      .replaceAll('// @ts-expect-error', '//');
    await writeFile(
      `${GENERATED}type-errors-unmarked.ts`,
      loose
        .replaceAll("'./generated/demo.js'", "'./demo.js'")
        .replaceAll("'../../src/index.js'", "'../../../src/index.js'"),
    );
    await writeFile(
      `${GENERATED}tsconfig.unmarked.json`,
      JSON.stringify({ extends: './tsconfig.json', files: [`${GENERATED}type-errors-unmarked.ts`] }),
    );
    const unmarked = await run(process.execPath, [
      `${ROOT}node_modules/typescript/bin/tsc`,
      '-p',
      `${GENERATED}tsconfig.unmarked.json`,
    ]).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }));
    expect(unmarked.stdout.match(/error TS/g)?.length ?? 0).toBeGreaterThanOrEqual(10);

    const driven = await run(process.execPath, ['--import', 'tsx', `${E2E}drive-demo.ts`], {
      cwd: ROOT,
      env: {
        ...process.env,
        ONTO_CONTROL_URL: urls[0],
        ONTO_DATA_URL: urls[1],
        ONTO_INTELLIGENCE_URL: urls[2],
        ONTO_API_TOKEN: BOOTSTRAP,
      },
      timeout: 120_000,
    });
    const seen = JSON.parse(driven.stdout.trim().split('\n').at(-1) as string);

    // CRUD with ETags and If-Match; a stale If-Match is a 412 with the current version.
    expect(seen.created.etag).toBe(`"${seen.created.version}"`);
    expect(seen.read).toEqual({ version: seen.created.version, amount: 250 });
    expect(seen.patched).toEqual({ version: seen.created.version + 1, amount: 300 });
    expect(seen.stale).toEqual({ status: 412, currentVersion: seen.patched.version });
    expect(seen.invalid).toEqual({ status: 422, paths: ['/properties/amount'] });
    // The 503 was retried after its Retry-After (1 s).
    expect(seen.seen.unavailable).toBe(1);
    expect(seen.seen.retriedAfterMs).toBeGreaterThanOrEqual(950);

    // Read-your-writes into intelligence: the value read reflects the write just made.
    expect(seen.derived.value).toBe(1200 + 530);
    expect(seen.derived.sourceSeq).toBeGreaterThanOrEqual(seen.writtenAt);
    // The read model queried through the client: every page (one object each) of the customers who
    // spent, by what they spent, the write just made included; and the aggregation agrees.
    // More than one page (pageSize 1): later pages follow the token with the body as first sent.
    expect(seen.readModel.pks.length).toBeGreaterThan(1);
    expect(seen.readModel.pks).toContain('c-1');
    expect(seen.readModel.totals[seen.readModel.pks.indexOf('c-1')]).toBe(1200 + 530);
    expect(seen.readModel.totals).toEqual([...seen.readModel.totals].sort((a: number, b: number) => b - a));
    expect(seen.readModel.sum).toBe(seen.readModel.totals.reduce((a: number, b: number) => a + b, 0));

    // validateOnly: valid, the edit it would make, nothing changed; bad parameters named by path.
    expect(seen.check).toMatchObject({
      valid: true,
      errors: [],
      edits: [{ op: 'modifyObject', objectType: 'Order', pk: 'o-sdk', properties: { status: 'shipped' } }],
    });
    expect(seen.statusAfterCheck).toBe('open');
    expect(seen.refused).toMatchObject({ valid: false, edits: [], errors: [{ path: '/parameters/order' }] });
    // The run whose answer was lost was sent again with the same key and replayed, not run twice.
    expect(seen.seen.lost).toBe(1);
    expect(seen.seen.actionKeys).toHaveLength(2);
    expect(seen.seen.actionKeys[0]).toBe(seen.seen.actionKeys[1]);
    expect(seen.run).toMatchObject({ status: 'COMPLETED', replayed: true });
    expect(seen.shipped.status).toBe('shipped');
    // A batch: each item under its own key, answered alone; the same batch again replays item by item.
    expect(seen.batch).toMatchObject([
      { status: 202, replayed: false, paths: [] },
      { status: 422, replayed: false, action: null, paths: ['body/items/1/parameters/order'] },
    ]);
    expect(seen.batchAgain).toMatchObject([
      { status: 202, replayed: true, action: seen.batch[0].action },
      { status: 422, replayed: false },
    ]);

    // The stored state: the object as the driver left it, one action for the key.
    const stored = await s.dataCall('GET', '/v1/worlds/demo/objects/Order/o-sdk');
    expect(stored.json()).toMatchObject({
      version: seen.shipped.version,
      properties: { amount: 300, status: 'shipped' },
    });
    const intelligence = s.intelligence;
    if (!intelligence) throw new Error('the stack has no intelligence service');
    const { rows } = await intelligence.app.pg.query(
      'SELECT count(*)::int AS n FROM actions WHERE world_id = $1 AND idempotency_key = $2',
      ['demo', seen.seen.actionKeys[0]],
    );
    expect(rows[0].n).toBe(1);

    // The schema moved (a new required property of Customer): named, with the advice to regenerate.
    expect(seen.moved.paths).toEqual(['/objectTypes/Customer/properties/loyalty']);
    expect(seen.moved.message).toMatch(/moved incompatibly.*loyalty is new and required.*onto-admin codegen/);
    expect(seen.query).toEqual({
      where: { amount: { $gte: 100 }, status: { $in: ['open', 'shipped'] } },
      orderBy: [{ property: 'amount', direction: 'desc' }],
      select: ['id', 'amount'],
      pageSize: 50,
    });
  }, 300_000);
});
