import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyHorizons } from '../../control/src/worlds/retention.js';
import { dataStack, expectProblem, type Stack } from './stack.js';

/*
 * History retention, the rest of it (issue 34, docs/adr/0077), on the real stack: the horizon data
 * announces is answered by control's GET /v1/worlds/{world} (learnt from Kafka), and intelligence
 * prunes its decision history (decisions_history, for ?at= on decisions) under the same rule and
 * horizon as its read model. A world D gets four decisions, each rejected: one before any anchor,
 * one across a tag, one across a child's fork, one after both; its data history is made ten days
 * old, then a policy of one day is set. The rows across the tag and the fork stay (a read at the
 * tag or the fork point reads them), the two others go; reads at kept refs answer as before and
 * reads below the horizon 410.
 */

const D = 'rd';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};
const mark = {
  parameters: { order: { type: 'string', required: true } },
  edits: [{ op: 'modifyObject', objectType: 'Order', pk: { param: 'order' }, values: { amount: { value: 0 } } }],
};

type DecisionRow = { id: string; pk: string; seq: number; next: number };

describe('history retention: the horizon in control, decision history in intelligence', () => {
  let s: Stack;

  beforeAll(async () => {
    s = await dataStack({
      intelligence: true,
      dataEnv: { RETENTION_PRUNE_INTERVAL_MS: '1000', RETENTION_PRUNE_BATCH: '5', RETENTION_PRUNE_GRACE_MS: '200' },
      // Batches of one decision row: a pass over decisions takes several.
      intelligenceEnv: { RETENTION_PRUNE_BATCH: '1', RETENTION_PRUNE_GRACE_MS: '200' },
      controlEnv: { RETENTION_MIN_DAYS: '1', CHECKER_INTERVAL_MS: '0' },
    });
  }, 120_000);
  afterAll(async () => s?.close());

  const intel = () => {
    if (!s.intelligence) throw new Error('no intelligence');
    return s.intelligence.app.pg;
  };
  const ok = async (what: string, res: Promise<LightMyRequestResponse>) => {
    const r = await res;
    expect(r.statusCode, `${what}: ${r.body}`).toBeLessThan(300);
    return r;
  };
  const put = async (pk: string, amount: number) =>
    Number(
      String(
        (
          await ok(
            'put',
            s.dataCall('PUT', `/v1/worlds/${D}/objects/Order/${pk}`, { body: { properties: { id: pk, amount } } }),
          )
        ).headers['x-consistency-token'],
      ).replace('data=', ''),
    );
  /** The pending decision on order `pk`, once intelligence has made it. */
  const decisionOn = (pk: string) =>
    s.until(
      `the decision on ${pk}`,
      async () => {
        const list = (await s.intelCall('GET', `/v1/worlds/${D}/decisions`)).json().decisions as {
          id: string;
          pk: string;
        }[];
        return list.find((d) => d.pk === pk);
      },
      60_000,
    );
  const reject = async (id: string) =>
    ok('reject', s.intelCall('POST', `/v1/worlds/${D}/decisions/${id}/reject`, { body: { reason: 'test' } }));
  const decisionHistory = async (): Promise<DecisionRow[]> => {
    const { rows } = await intel().query<{ id: string; pk: string; seq: string; next: string }>(
      `SELECT h.id, h.pk, h.seq::text,
              coalesce((SELECT min(y.seq) FROM decisions_history y WHERE y.world_id = h.world_id AND y.id = h.id AND y.seq > h.seq),
                       (SELECT d.seq FROM decisions d WHERE d.world_id = h.world_id AND d.id = h.id))::text AS next
         FROM decisions_history h WHERE h.world_id = $1 ORDER BY h.pk, h.seq`,
      [D],
    );
    return rows.map((r) => ({ id: r.id, pk: r.pk, seq: Number(r.seq), next: Number(r.next) }));
  };

  it("prunes decision history at data's horizon and answers the horizon in control", async () => {
    await s.world(D, { objectTypes: { Order }, actionTypes: { mark } });
    const define = (path: string, body: unknown) => ok(path, s.intelCall('PUT', `/v1/worlds/${D}/${path}`, { body }));
    await define('rules/big', {
      objectType: 'Order',
      condition: 'self.amount > 100',
      alertType: 'big',
      severity: 'warning',
    });
    await define('decision-definitions/review', {
      rule: 'big',
      actionType: 'mark',
      parameters: { order: 'self.id' },
      approval: 'manual',
    });
    // Nothing pruned yet: control answers no horizon.
    expect((await s.controlCall('GET', `/v1/worlds/${D}`)).json().historyHorizon).toBeNull();

    // o1 decided and rejected before any anchor; o2 across the tag t1; o3 across the fork of rd-c;
    // o4 after both.
    const first = await put('o1', 200);
    await reject((await decisionOn('o1')).id);
    await put('o2', 200);
    const d2 = await decisionOn('o2');
    await ok('tag', s.controlCall('PUT', `/v1/worlds/${D}/tags/t1`, { body: {} }));
    await s.until('tag t1 complete', async () =>
      (await s.controlCall('GET', `/v1/worlds/${D}/tags/t1`)).json().status === 'COMPLETE' ? true : undefined,
    );
    await reject(d2.id);
    await put('o3', 200);
    const d3 = await decisionOn('o3');
    await ok('fork', s.controlCall('POST', '/v1/worlds', { body: { id: 'rd-c', from: { world: D } } }));
    await s.until('rd-c READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/rd-c')).json().status === 'READY' ? true : undefined,
    );
    await reject(d3.id);
    const last = await put('o4', 200);
    await reject((await decisionOn('o4')).id);
    await s.until('four rejections', async () => {
      const list = (await s.intelCall('GET', `/v1/worlds/${D}/decisions`)).json().decisions as { status: string }[];
      return list.length === 4 && list.every((d) => d.status === 'REJECTED') ? true : undefined;
    });

    // D's data history becomes ten days old; then a recent write.
    const age = (table: string, column: string) =>
      s.data.app.pg.query(
        `UPDATE ${table} SET ${column} = ${column} - interval '10 days' WHERE world_id = $1 AND seq <= $2`,
        [D, last],
      );
    await age('object_heads', 'updated_at');
    await age('object_history', 'written_at');
    await s.data.app.pg.query(`UPDATE worlds SET provisioned_at = provisioned_at - interval '10 days' WHERE id = $1`, [
      D,
    ]);
    const recent = await put('o5', 1);
    await s.until('intelligence applied the recent write', async () =>
      (
        await s.intelCall('GET', `/v1/worlds/${D}/objects/Order/o5`, {
          headers: { 'x-consistency-token': `data=${recent}` },
        })
      ).statusCode === 200
        ? true
        : undefined,
    );

    // What the rule keeps: a row holding the moment of a read at a kept point below the horizon
    // (the tag's, the fork's: each is its own anchor), none else (every row ended before the
    // horizon's moment, and no keepVersions).
    const { rows: anchors } = await intel().query<{ name: string; commit: string; moment: string }>(
      `SELECT name, commit::text, moment::text FROM world_tags WHERE world_id = $1
       UNION ALL SELECT f.world_id, b.base_seq::text, f.moment::text FROM fork_points f
         JOIN world_bases b ON b.world_id = f.world_id WHERE f.base_world = $1`,
      [D],
    );
    expect(anchors.map((a) => a.name).sort()).toEqual(['rd-c', 't1']);
    const moments = anchors.map((a) => Number(a.moment));
    const before = await decisionHistory();
    expect(before.map((r) => r.pk)).toEqual(['o1', 'o2', 'o3', 'o4']);
    const kept = before.filter((r) => moments.some((m) => r.seq <= m && m < r.next));
    expect(kept.map((r) => r.pk)).toEqual(['o2', 'o3']);

    // Decisions read at kept refs (the tag, its commit, the fork point, the horizon, now).
    const tagCommit = anchors.find((a) => a.name === 't1')?.commit as string;
    const forkPoint = anchors.find((a) => a.name === 'rd-c')?.commit as string;
    const refs = ['t1', tagCommit, forkPoint, String(last), String(recent)];
    const reads = async () => {
      const answers: Record<string, unknown> = {};
      for (const ref of refs) {
        const res = await s.intelCall('GET', `/v1/worlds/${D}/decisions?at=${ref}`);
        answers[ref] = [
          res.statusCode,
          (res.json().decisions as { pk: string; status: string }[]).map((d) => `${d.pk} ${d.status}`).sort(),
        ];
        const one = await s.intelCall('GET', `/v1/worlds/${D}/decisions/${d3.id}?at=${ref}`);
        answers[`${ref} d3`] = [one.statusCode, one.json().status ?? null];
      }
      return answers;
    };
    const readsBefore = await reads();
    // The reads see the versions the kept rows hold.
    expect(readsBefore.t1).toEqual([200, ['o1 REJECTED', 'o2 PENDING_APPROVAL']]);
    expect(readsBefore[`${forkPoint} d3`]).toEqual([200, 'PENDING_APPROVAL']);
    expect((await s.intelCall('GET', `/v1/worlds/${D}/decisions?at=${first}`)).statusCode).toBe(200);

    // The policy: data's pass moves the horizon to the last old write and announces it.
    await ok('policy', s.controlCall('PUT', `/v1/worlds/${D}/retention`, { body: { keepDays: 1 } }));
    await s.until(
      "intelligence's pass at the horizon",
      async () => {
        const { rows } = await intel().query<{ h: string; pass_table: number | null }>(
          'SELECT horizon_seq AS h, pass_table FROM world_horizons WHERE world_id = $1',
          [D],
        );
        return rows[0] && Number(rows[0].h) === last && rows[0].pass_table === null ? true : undefined;
      },
      60_000,
    );

    // Row by row: exactly the rows across the tag and the fork are left.
    const after = await decisionHistory();
    expect(after).toEqual(kept);
    expect(await reads()).toEqual(readsBefore);
    // Below the horizon, a read of decisions answers 410 with the horizon.
    const gone = expectProblem(await s.intelCall('GET', `/v1/worlds/${D}/decisions?at=${first}`), 410) as {
      horizon: number;
      errors: { path: string }[];
    };
    expect(gone).toMatchObject({ horizon: last, errors: [{ path: 'querystring/at' }] });
    expectProblem(await s.intelCall('GET', `/v1/worlds/${D}/decisions/${d3.id}?at=${first}`), 410);

    // control answers the horizon data announced, with the world and in the list; the child has none.
    const { rows: dataHorizon } = await s.data.app.pg.query<{ h: string }>(
      'SELECT horizon_seq::text AS h FROM world_retention WHERE world_id = $1',
      [D],
    );
    expect(Number(dataHorizon[0]?.h)).toBe(last);
    const world = await s.until('the horizon in control', async () => {
      const w = (await s.controlCall('GET', `/v1/worlds/${D}`)).json();
      return w.historyHorizon ? w : undefined;
    });
    expect(world.historyHorizon).toEqual({ commit: last, movedAt: expect.any(String) });
    expect(Date.now() - Date.parse(world.historyHorizon.movedAt)).toBeLessThan(120_000);
    const listed = (await s.controlCall('GET', '/v1/worlds')).json().worlds as {
      id: string;
      historyHorizon: unknown;
    }[];
    expect(listed.find((w) => w.id === D)?.historyHorizon).toEqual(world.historyHorizon);
    expect(listed.find((w) => w.id === 'rd-c')?.historyHorizon).toBeNull();
    // An older horizon announced again (a redelivery, a late event) changes nothing.
    const client = await s.control.app.pg.connect();
    try {
      await applyHorizons(client, [
        {
          event: {
            type: 'storage.history.horizon',
            world_id: D,
            occurred_at: new Date().toISOString(),
            payload: { horizon: first },
          },
        } as unknown as Parameters<typeof applyHorizons>[1][number],
      ]);
    } finally {
      client.release();
    }
    expect((await s.controlCall('GET', `/v1/worlds/${D}`)).json().historyHorizon).toEqual(world.historyHorizon);

    // intelligence counts the decision rows it keeps among its history rows.
    const metrics = (await s.intelligence?.app.inject({ method: 'GET', url: '/metrics' }))?.body ?? '';
    const pruned = [
      ...metrics.matchAll(
        new RegExp(
          `^onto_history_pruned_total\\{world="${D}",service="intelligence",table="decisions"\\} (\\d+)$`,
          'gm',
        ),
      ),
    ].map((m) => Number(m[1]));
    expect(pruned).toEqual([2]);
  }, 240_000);
});
