import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, expectProblem, type Stack } from './stack.js';

const Machine = {
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string' },
    temperature: { type: { type: 'series', value: 'double' }, retention: '3d' },
  },
};
const feeds = { from: 'Machine', to: 'Machine', cardinality: 'MANY_TO_MANY' };
const install = {
  parameters: { id: { type: 'string', required: true } },
  edits: [{ op: 'createObject', objectType: 'Machine', pk: { param: 'id' }, values: { name: { param: 'id' } } }],
};
const W = 'guarded';
const NDJSON = { 'content-type': 'application/x-ndjson' };

/**
 * Protected worlds (docs/adr/0058): control sets the protection, data learns it from
 * world.protection.updated and refuses every direct write path with a 403 naming it, storing nothing.
 */
describe('a protected world', () => {
  let s: Stack;
  let owner: string;
  let editor: string;
  const now = Date.now();
  const base = Math.floor(now / 86_400_000) * 86_400_000 - 86_400_000;

  const state = async () => {
    const q = async (sql: string) => (await s.data.app.pg.query<{ n: number }>(sql, [W])).rows[0]?.n;
    return {
      objects: await q(`SELECT count(*)::int AS n FROM object_heads WHERE world_id = $1 AND NOT deleted`),
      versions: await q(`SELECT coalesce(sum(version), 0)::int AS n FROM object_heads WHERE world_id = $1`),
      links: await q(`SELECT count(*)::int AS n FROM link_heads WHERE world_id = $1 AND NOT deleted`),
      points: await q(
        `SELECT count(*)::int AS n FROM series_points p JOIN series_keys k ON k.id = p.series_id WHERE k.world_id = $1`,
      ),
      outbox: await q(`SELECT count(*)::int AS n FROM outbox_events WHERE partition_key LIKE $1 || '/%'`),
    };
  };
  const protect = async (body: Record<string, unknown>, token = owner) =>
    s.controlCall('PUT', `/v1/worlds/${W}/protection`, { token, body });
  const inData = (requireMerge: boolean) =>
    s.until(`protection ${requireMerge} in data`, async () => {
      const { rows } = await s.data.app.pg.query<{ require_merge: boolean }>(
        'SELECT require_merge FROM worlds WHERE id = $1',
        [W],
      );
      return rows[0]?.require_merge === requireMerge ? true : undefined;
    });

  beforeAll(async () => {
    s = await dataStack({ intelligence: true });
    await s.world(W, { objectTypes: { Machine }, linkTypes: { feeds }, actionTypes: { install } });
    owner = await s.user('olive', W, 'owner');
    editor = await s.user('ed', W, 'editor');
    for (const pk of ['m1', 'm2']) {
      const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/${pk}`, {
        token: editor,
        body: { properties: { id: pk, name: pk } },
      });
      expect(res.statusCode, res.body).toBe(201);
    }
    expect((await s.dataCall('PUT', `/v1/worlds/${W}/links/feeds/m1/m2`, { token: editor })).statusCode).toBe(201);
  }, 120_000);
  afterAll(async () => s?.close());

  it('refuses bad protection settings with a problem naming the field, and non-owners', async () => {
    const owners = (
      await s.control.app.pg.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM world_roles WHERE world_id = $1 AND role = 'owner'`,
        [W],
      )
    ).rows[0]?.n;
    const tooMany = await protect({ requireMerge: true, requiredApprovals: (owners ?? 0) + 1 });
    expect(expectProblem(tooMany, 422).errors).toEqual([
      { path: '/requiredApprovals', message: `must be at most the number of the world's owners (${owners})` },
    ]);
    for (const [body, path] of [
      [{ requiredApprovals: 1 }, /requireMerge/],
      [{ requireMerge: 'yes' }, /requireMerge/],
      [{ requireMerge: true, requiredChecks: ['ok', 'ok'] }, /requiredChecks/],
      [{ requireMerge: true, requiredChecks: ['no spaces'] }, /requiredChecks\/0/],
      [{ requireMerge: true, approvals: 1 }, /approvals/],
    ] as const) {
      const problem = expectProblem(await protect(body), 400);
      expect(JSON.stringify(problem.errors), JSON.stringify(body)).toMatch(path);
    }
    // A check must name a rule the world has in intelligence.
    const unknownRule = await protect({ requireMerge: true, requiredChecks: ['no_such_rule'] });
    expect(expectProblem(unknownRule, 422).errors).toEqual([
      { path: '/requiredChecks/0', message: `is not a rule of world ${W} (as intelligence reported)` },
    ]);
    expectProblem(await protect({ requireMerge: true }, editor), 403);
    expectProblem(await s.controlCall('PUT', '/v1/worlds/nowhere/protection', { body: { requireMerge: true } }), 404);
    // Nothing was set.
    expect((await s.controlCall('GET', `/v1/worlds/${W}/protection`)).json()).toMatchObject({
      requireMerge: false,
      revision: 0,
    });
    const { rowCount } = await s.control.app.pg.query('SELECT 1 FROM world_protection WHERE world_id = $1', [W]);
    expect(rowCount).toBe(0);
  });

  it('refuses a direct write on every path with 403 naming the protection, and stores nothing', async () => {
    // The rule the protection names: intelligence reports its rules to control.
    const rule = await s.intelCall('PUT', `/v1/worlds/${W}/rules/no_overheat`, {
      body: { objectType: 'Machine', condition: 'name == "hot"', alertType: 'overheat', severity: 'warning' },
    });
    expect(rule.statusCode, rule.body).toBe(201);
    await s.until('the rule known to control', async () => {
      const { rows } = await s.control.app.pg.query('SELECT rules FROM world_rules WHERE world_id = $1', [W]);
      return rows[0]?.rules.includes('no_overheat') ? true : undefined;
    });
    const set = await protect({ requireMerge: true, requiredApprovals: 1, requiredChecks: ['no_overheat'] });
    expect(set.statusCode, set.body).toBe(200);
    expect(set.json()).toMatchObject({
      world: W,
      requireMerge: true,
      requiredApprovals: 1,
      requiredChecks: ['no_overheat'],
      allowActions: false,
      revision: 1,
      updatedBy: 'olive',
    });
    const events = await s.records('onto.worlds', (seen) =>
      seen.some((e) => e.event.type === 'world.protection.updated' && e.event.world_id === W),
    );
    expect(events.find((e) => e.event.type === 'world.protection.updated')?.event.payload).toEqual({
      requireMerge: true,
      requiredApprovals: 1,
      requiredChecks: ['no_overheat'],
      allowActions: false,
      revision: 1,
    });
    await inData(true);
    const before = await state();

    const object = (pk: string) => `/v1/worlds/${W}/objects/Machine/${pk}`;
    const attempts = [
      ['PUT object', s.dataCall('PUT', object('m3'), { token: editor, body: { properties: { id: 'm3' } } })],
      ['PUT object (replace)', s.dataCall('PUT', object('m1'), { body: { properties: { id: 'm1', name: 'x' } } })],
      [
        'PATCH object',
        s.dataCall('PATCH', object('m1'), {
          body: { properties: { name: 'y' } },
          headers: { 'content-type': 'application/merge-patch+json' },
        }),
      ],
      ['DELETE object', s.dataCall('DELETE', object('m2'))],
      ['PUT link', s.dataCall('PUT', `/v1/worlds/${W}/links/feeds/m2/m1`)],
      ['DELETE link', s.dataCall('DELETE', `/v1/worlds/${W}/links/feeds/m1/m2`)],
      [
        'bulk',
        s.dataCall('POST', `/v1/worlds/${W}/bulk/Machine`, {
          body: `${JSON.stringify({ properties: { id: 'b1' } })}\n`,
          headers: NDJSON,
        }),
      ],
      [
        'series',
        s.dataCall('POST', `/v1/worlds/${W}/series/Machine/m1/temperature`, {
          body: { points: [{ time: new Date(base).toISOString(), value: 20 }] },
        }),
      ],
      [
        'series (bulk)',
        s.dataCall('POST', `/v1/worlds/${W}/series`, {
          body: `${JSON.stringify({ type: 'Machine', pk: 'm1', series: 'temperature', time: new Date(base).toISOString(), value: 1 })}\n`,
          headers: NDJSON,
        }),
      ],
    ] as const;
    for (const [what, pending] of attempts) {
      const problem = expectProblem(await pending, 403);
      expect(problem, what).toMatchObject({
        type: 'https://onto.dev/problems/protected-world',
        world: W,
        protection: { requireMerge: true, allowActions: false },
      });
      expect(problem.detail, what).toMatch(/protected \(requireMerge\)/);
    }
    expect(await state()).toEqual(before);
    // Reads are not refused.
    expect((await s.dataCall('GET', object('m1'))).statusCode).toBe(200);
  });

  it("refuses an action's edits unless the protection allows actions", async () => {
    const post = (id: string) =>
      s.intelCall('POST', `/v1/worlds/${W}/actions/install`, {
        token: editor,
        body: { parameters: { id } },
        headers: { 'idempotency-key': `k-${id}` },
      });
    const run = async (id: string) => {
      const res = await post(id);
      expect(res.statusCode, res.body).toBe(202);
      return s.until(`action for ${id} final`, async () => {
        const a = (await s.intelCall('GET', `/v1/worlds/${W}/actions/${res.json().id}`)).json();
        return ['COMPLETED', 'COMPENSATED', 'FAILED'].includes(a.status) ? a : undefined;
      });
    };
    const intel = s.intelligence?.app.pg;
    if (!intel) throw new Error('no intelligence');
    const inIntelligence = (allowActions: boolean) =>
      s.until(`protection (actions ${allowActions}) in intelligence`, async () => {
        const { rows } = await intel.query(
          'SELECT require_merge, allow_actions, required_approvals, required_checks FROM worlds WHERE id = $1',
          [W],
        );
        return rows[0]?.require_merge && rows[0]?.allow_actions === allowActions ? rows[0] : undefined;
      });
    // intelligence learnt the protection from control's event, and starts no action from a request.
    expect(await inIntelligence(false)).toEqual({
      require_merge: true,
      allow_actions: false,
      required_approvals: 1,
      required_checks: ['no_overheat'],
    });
    const early = expectProblem(await post('a0'), 403);
    expect(early).toMatchObject({ type: 'https://onto.dev/problems/protected-world', world: W });
    expect((await intel.query('SELECT 1 FROM actions WHERE world_id = $1', [W])).rowCount).toBe(0);

    // data refuses the edits itself, whoever started the action: here intelligence is made to lag.
    await intel.query('UPDATE worlds SET require_merge = false WHERE id = $1', [W]);
    const refused = await run('a1');
    await intel.query('UPDATE worlds SET require_merge = true WHERE id = $1', [W]);
    expect(refused.status).toBe('COMPENSATED');
    expect(refused.refusal).toMatchObject({ step: 0, status: 403, code: 'protected-world' });
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/a1`), 404);

    const allowed = await protect({ requireMerge: true, requiredApprovals: 1, allowActions: true });
    expect(allowed.json()).toMatchObject({ allowActions: true, revision: 2 });
    await s.until('actions allowed in data', async () => {
      const { rows } = await s.data.app.pg.query('SELECT allow_actions FROM worlds WHERE id = $1', [W]);
      return rows[0]?.allow_actions === true ? true : undefined;
    });
    await inIntelligence(true);
    expect((await run('a2')).status).toBe('COMPLETED');
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/a2`)).json()).toMatchObject({
      properties: { id: 'a2', name: 'a2' },
    });
    // Direct writes stay refused.
    expectProblem(
      await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/a3`, { body: { properties: { id: 'a3' } } }),
      403,
    );
  }, 60_000);

  it('accepts direct writes again once the protection is lifted', async () => {
    const lifted = await protect({ requireMerge: false });
    expect(lifted.json()).toMatchObject({ requireMerge: false, requiredApprovals: 0, requiredChecks: [], revision: 3 });
    await inData(false);
    const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/m3`, {
      token: editor,
      body: { properties: { id: 'm3' } },
    });
    expect(res.statusCode, res.body).toBe(201);
    const { rows } = await s.data.app.pg.query('SELECT protection_revision FROM worlds WHERE id = $1', [W]);
    expect(rows[0]).toEqual({ protection_revision: 3 });
  });
});
