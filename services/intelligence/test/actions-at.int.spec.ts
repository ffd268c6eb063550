import { randomUUID } from 'node:crypto';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HistoryPruner, recordHorizon } from '../src/readmodel/retention.js';
import { stateAt } from '../src/worlds/ref.js';
import { expectProblem, forkWorld, type IntelligenceStack, intelligenceStack, Order, reprice } from './stack.js';

/**
 * Actions at a ref (issue 35, docs/adr/0078): an action and its steps read at a ref exactly as
 * intelligence held them then — before it started (none), while it ran (held mid-saga by the
 * test), after it ended — and a fork at a ref lists its base's actions as of the fork point, never
 * one the base started later, through a chain of forks; pruning below the horizon keeps what the
 * kept refs read and answers 410 elsewhere.
 */

const W = 'acts';
const actionTypes = {
  // Closes the order, then sets a price data refuses: compensated.
  reprice,
  close: {
    parameters: { orderId: { type: 'string', required: true } },
    edits: [
      { op: 'modifyObject', objectType: 'Order', pk: { param: 'orderId' }, values: { status: { value: 'closed' } } },
    ],
  },
};

type Step = { n: number; state: string };
type Action = { id: string; world: string; status: string; inherited: boolean; steps: Step[] };
type Summary = { id: string; status: string; inherited: boolean; world?: string };

describe('actions at a ref, in forks, and pruned at the horizon', () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world(W, { objectTypes: { Order }, actionTypes });
  }, 120_000);
  afterAll(async () => s?.close());

  const intel = () => {
    const pg = s.intelligence?.app.pg;
    if (!pg) throw new Error('no intelligence');
    return pg;
  };
  const order = async (world: string, pk: string, amount: number) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/Order/${pk}`, {
      body: { properties: { id: pk, amount, status: 'open' } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return Number(String(res.headers['x-consistency-token']).replace('data=', ''));
  };
  const tag = async (name: string) => {
    const made = await s.controlCall('PUT', `/v1/worlds/${W}/tags/${name}`, { body: {} });
    expect(made.statusCode, made.body).toBe(201);
    const got = await s.until(`tag ${name} COMPLETE`, async () => {
      const t = (await s.controlCall('GET', `/v1/worlds/${W}/tags/${name}`)).json();
      return t.status === 'COMPLETE' ? t : undefined;
    });
    // intelligence knows the tag's commit (its read at the tag waits for nothing else).
    await s.until(`tag ${name} positioned in intelligence`, async () => {
      const { rows } = await intel().query(
        'SELECT 1 FROM world_tags WHERE world_id = $1 AND name = $2 AND commit IS NOT NULL',
        [W, name],
      );
      return rows.length > 0 ? true : undefined;
    });
    return got.ref.data as number;
  };
  const fork = (id: string, from: string, ref?: string) => forkWorld(s, id, from, ref);
  const start = async (world: string, type: string, parameters: Record<string, unknown>) => {
    const key = randomUUID();
    const res = await s.until(`${type} started in ${world}`, async () => {
      const r = await s.intelCall('POST', `/v1/worlds/${world}/actions/${type}`, {
        body: { parameters },
        headers: { 'idempotency-key': key },
      });
      return r.statusCode === 202 ? r : undefined;
    });
    return res.json().id as string;
  };
  const settled = (world: string, id: string, status: string) =>
    s.until(`${id} ${status}`, async () => {
      const a = (await s.intelCall('GET', `/v1/worlds/${world}/actions/${id}`)).json();
      return a.status === status ? (a as Action) : undefined;
    });
  const at = (ref: string | undefined) => (ref === undefined ? '' : `?at=${encodeURIComponent(ref)}`);
  /** The action as `world` reads it at `ref`: status and step states, or the status code. */
  const read = async (world: string, id: string, ref?: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/actions/${id}${at(ref)}`);
    if (res.statusCode !== 200) return res.statusCode;
    const a = res.json() as Action;
    return { world: a.world, status: a.status, inherited: a.inherited, steps: a.steps.map((x) => x.state) };
  };
  /** The list `world` answers at `ref`: id, status, inherited and base of each. */
  const list = async (world: string, ref?: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/actions${at(ref)}`);
    expect(res.statusCode, res.body).toBe(200);
    return (res.json().actions as Summary[]).map((a) => `${a.id} ${a.status}${a.inherited ? ` from ${a.world}` : ''}`);
  };

  let x = '';
  let cUnkept = 0;

  it('an action and its steps before, while and after it ran; a fork sees its base as of the fork point', async () => {
    await order(W, 'o0', 1);
    await tag('before');

    // The saga held after its first step was asked for: the test locks the action's row before
    // data's reply can advance it (a reply that came first voids the attempt: another order).
    const held = await intel().connect();
    try {
      for (let attempt = 0; ; attempt++) {
        expect(attempt, 'the saga was held before its first reply').toBeLessThan(5);
        await order(W, `o${attempt + 1}`, 5);
        const id = await start(W, 'reprice', { orderId: `o${attempt + 1}`, price: 'not a number' });
        await held.query('BEGIN');
        await held.query('SELECT 1 FROM actions WHERE world_id = $1 AND id = $2 FOR UPDATE', [W, id]);
        const { rows } = await held.query<{ state: string }>(
          'SELECT state FROM action_steps WHERE world_id = $1 AND action_id = $2 ORDER BY n',
          [W, id],
        );
        if (rows[0]?.state === 'REQUESTED') {
          x = id;
          break;
        }
        await held.query('ROLLBACK');
      }
      // While it runs: a write of the world, then the tag.
      await order(W, 'mid', 2);
      await tag('during');
      await held.query('COMMIT');
    } finally {
      held.release();
    }
    const done = await settled(W, x, 'COMPENSATED');
    expect(done.steps.map((st) => st.state)).toEqual(['COMPENSATED', 'REFUSED']);
    await order(W, 'late', 3);
    const afterCommit = await tag('after');

    const running = { world: W, status: 'RUNNING', inherited: false, steps: ['REQUESTED', 'PENDING'] };
    const compensated = { world: W, status: 'COMPENSATED', inherited: false, steps: ['COMPENSATED', 'REFUSED'] };
    expect(await read(W, x, 'before')).toBe(404);
    expect(await read(W, x, 'during')).toEqual(running);
    expect(await read(W, x, 'after')).toEqual(compensated);
    expect(await read(W, x)).toEqual(compensated);
    expect(await read(W, x, String(afterCommit))).toEqual(compensated);
    expect(await list(W, 'before')).toEqual([]);
    expect(await list(W, 'during')).toContain(`${x} RUNNING`);
    expect(await list(W, 'after')).toContain(`${x} COMPENSATED`);
    // A filter applies to the state at the ref.
    const running0 = await s.intelCall('GET', `/v1/worlds/${W}/actions?status=RUNNING&at=during`);
    expect((running0.json().actions as Summary[]).map((a) => a.id)).toContain(x);
    const runningAfter = await s.intelCall('GET', `/v1/worlds/${W}/actions?status=RUNNING&at=after`);
    expect(runningAfter.json().actions).toEqual([]);

    // Forks at each ref, and an action the base starts after them all.
    await fork('acts-during', W, 'during');
    await fork('acts-after', W, 'after');
    const y = await start(W, 'close', { orderId: 'o0' });
    await settled(W, y, 'COMPLETED');
    await fork('acts-chain', 'acts-during');
    const own = await start('acts-after', 'close', { orderId: 'late' });
    await settled('acts-after', own, 'COMPLETED');

    const inheritedRunning = { ...running, inherited: true };
    const inheritedCompensated = { ...compensated, inherited: true };
    expect(await read('acts-during', x)).toEqual(inheritedRunning);
    expect(await read('acts-chain', x)).toEqual(inheritedRunning);
    expect(await read('acts-after', x)).toEqual(inheritedCompensated);
    for (const world of ['acts-during', 'acts-chain', 'acts-after']) {
      expect(await read(world, y), `${world} never sees ${y}`).toBe(404);
      const listed = await list(world);
      expect(
        listed.some((l) => l.startsWith(y)),
        `${world} lists ${listed}`,
      ).toBe(false);
    }
    expect((await list('acts-during')).filter((l) => l.startsWith(x))).toEqual([`${x} RUNNING from ${W}`]);
    expect((await list('acts-chain')).filter((l) => l.startsWith(x))).toEqual([`${x} RUNNING from ${W}`]);
    expect((await list('acts-after'))[0]).toBe(`${own} COMPLETED`);
    expect((await list('acts-after')).filter((l) => l.startsWith(x))).toEqual([`${x} COMPENSATED from ${W}`]);
    // The base and the other forks never see a fork's own action.
    expect(await read(W, own)).toBe(404);
    expect(await read('acts-during', own)).toBe(404);
    expect(await read(W, y)).toMatchObject({ status: 'COMPLETED', inherited: false });
    // A fork read at a ref of its own: the base's as of the fork point still.
    const forkHead = await order('acts-during', 'f1', 9);
    expect(await read('acts-during', x, String(forkHead))).toEqual(inheritedRunning);

    // Bad refs, naming at.
    const bad = expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions/${x}?at=no%20such`), 400);
    expect(bad.errors[0].path).toBe('querystring/at');
    expect(expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions?at=nosuchtag`), 404).errors[0].path).toBe(
      'querystring/at',
    );

    // A commit no tag or fork names, below the horizon the next test sets.
    cUnkept = await order(W, 'unkept', 4);
    await order(W, 'head', 4);
  }, 180_000);

  it('pruning below the horizon keeps what the tags and forks read, and 410 elsewhere', async () => {
    expect(x).not.toBe('');
    const versions = async () => {
      const { rows } = await intel().query<{ kind: string; revision: number }>(
        `SELECT 'action' AS kind, revision FROM action_versions WHERE world_id = $1 AND action_id = $2
         UNION ALL SELECT 'step ' || n, revision FROM action_step_versions WHERE world_id = $1 AND action_id = $2
         ORDER BY 1, 2`,
        [W, x],
      );
      return rows.map((r) => `${r.kind}@${r.revision}`);
    };
    // Each transition a version: started, step 0 done, step 1 refused, compensated.
    expect(await versions()).toEqual([
      'action@1',
      'action@2',
      'action@3',
      'action@4',
      'step 0@1',
      'step 0@2',
      'step 0@3',
      'step 0@4',
      'step 1@1',
      'step 1@2',
      'step 1@3',
    ]);
    const reads = async () => ({
      during: await read(W, x, 'during'),
      after: await read(W, x, 'after'),
      now: await read(W, x),
      fork: await read('acts-during', x),
      chain: await read('acts-chain', x),
      forkAfter: await read('acts-after', x),
    });
    const before = await reads();

    const { rows } = await intel().query<{ seq: string }>('SELECT seq FROM data_watermarks WHERE world_id = $1', [W]);
    const horizon = Number(rows[0]?.seq);
    expect(horizon).toBeGreaterThan(cUnkept);
    const client = await intel().connect();
    await recordHorizon(client, W, horizon).finally(() => client.release());
    const pruner = new HistoryPruner(
      intel(),
      new Registry(),
      { batch: 2, graceMs: 0 },
      async (db, world, commit) => (await stateAt(db, world, commit)).moment,
    );
    await s.until('the pass at the horizon ended', async () => {
      await pruner.step();
      const pass = await intel().query('SELECT 1 FROM world_horizons WHERE world_id = $1 AND pass_table IS NULL', [W]);
      return pass.rowCount ? true : undefined;
    });

    // Revision 1 is what the tag during and the fork at it read; 2 and 3 no kept ref reads.
    expect(await versions()).toEqual(['action@1', 'action@4', 'step 0@1', 'step 0@4', 'step 1@1', 'step 1@3']);
    expect(await reads()).toEqual(before);
    const gone = expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions/${x}?at=${cUnkept}`), 410) as {
      horizon: number;
      errors: { path: string }[];
    };
    expect(gone).toMatchObject({ horizon, errors: [{ path: 'querystring/at' }] });
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions?at=${cUnkept}`), 410);
  }, 120_000);
});
