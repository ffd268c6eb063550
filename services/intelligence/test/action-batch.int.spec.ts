import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * `POST /v1/worlds/{w}/actions/{type}/batch` (issue 30 item 6): up to 20 action requests in one,
 * each with its own idempotency key and its own result; one refused item stops no other.
 */
const W = 'batch';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer', required: true } },
};
const actionTypes = {
  placeOrder: {
    parameters: { orderId: { type: 'string', required: true }, amount: { type: 'integer', required: true } },
    edits: [
      { op: 'createObject', objectType: 'Order', pk: { param: 'orderId' }, values: { amount: { param: 'amount' } } },
    ],
  },
};
const FINAL = ['COMPLETED', 'COMPENSATED', 'FAILED'];

interface Result {
  index: number;
  idempotencyKey: string;
  status: number;
  replayed: boolean;
  action: { id: string; status: string; parameters: Record<string, unknown> } | null;
  validation: { valid: boolean; edits: unknown[] } | null;
  problem: { status: number; errors: { path: string }[] } | null;
}

describe('batches of actions', () => {
  let s: IntelligenceStack;
  beforeAll(async () => {
    s = await intelligenceStack();
    await s.world(W, { objectTypes: { Order }, actionTypes });
  }, 90_000);
  afterAll(async () => s?.close());

  const batch = (body: unknown) => s.intelCall('POST', `/v1/worlds/${W}/actions/placeOrder/batch`, { body });
  const order = async (pk: string) => {
    const res = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/${pk}`);
    return res.statusCode === 200 ? res.json().properties : null;
  };

  it('runs each item under its own key, answers each, replays a repeated batch item by item', async () => {
    const items = [
      { idempotencyKey: 'b-1', parameters: { orderId: 'o1', amount: 10 } },
      { idempotencyKey: 'b-2', parameters: { orderId: 'o2', amount: 1.5 } },
      { idempotencyKey: 'b-3', parameters: { orderId: 'o3', amount: 30 } },
    ];
    const res = await batch({ items });
    expect(res.statusCode, res.body).toBe(200);
    const results = res.json().results as Result[];
    expect(results.map((r) => [r.index, r.idempotencyKey, r.status, r.replayed])).toEqual([
      [0, 'b-1', 202, false],
      [1, 'b-2', 422, false],
      [2, 'b-3', 202, false],
    ]);
    expect(results[1]?.problem?.errors.map((e) => e.path)).toContain('body/items/1/parameters/amount');
    expect(results[0]?.action?.parameters).toEqual({ orderId: 'o1', amount: 10 });
    for (const r of [results[0], results[2]]) {
      await s.until(`action ${r?.action?.id} final`, async () => {
        const a = await s.intelCall('GET', `/v1/worlds/${W}/actions/${r?.action?.id}`);
        return FINAL.includes(a.json().status) ? a.json() : undefined;
      });
    }
    expect(await order('o1')).toEqual({ id: 'o1', amount: 10 });
    expect(await order('o3')).toEqual({ id: 'o3', amount: 30 });
    expect(await order('o2')).toBeNull();

    // The same batch again: each accepted item replays its first answer, nothing runs twice; a key
    // reused with other parameters is that item's 422 only.
    const again = (
      await batch({ items: [...items.slice(0, 2), { ...items[2], parameters: { orderId: 'o3', amount: 31 } }] })
    ).json().results as Result[];
    expect(again.map((r) => [r.status, r.replayed])).toEqual([
      [202, true],
      [422, false],
      [422, false],
    ]);
    expect(again[0]?.action?.id).toBe(results[0]?.action?.id);
    expect(again[2]?.problem?.errors.map((e) => e.path)).toEqual(['body/items/2/idempotencyKey']);
    const { rows } = await (s.intelligence?.app.pg.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM actions WHERE world_id = $1 AND action_type = 'placeOrder'",
      [W],
    ) ?? Promise.reject(new Error('no intelligence')));
    expect(rows[0]?.n).toBe(2);
  }, 90_000);

  it('validates a batch without running it', async () => {
    const res = await batch({
      validateOnly: true,
      items: [
        { idempotencyKey: 'v-1', parameters: { orderId: 'v1', amount: 1 } },
        { idempotencyKey: 'v-2', parameters: { orderId: 'v2' } },
      ],
    });
    expect(res.statusCode, res.body).toBe(200);
    const results = res.json().results as Result[];
    expect(results.map((r) => [r.status, r.validation?.valid, r.validation?.edits.length])).toEqual([
      [200, true, 1],
      [200, false, 0],
    ]);
    expect(await order('v1')).toBeNull();
  }, 30_000);

  it('bounds a batch: 21 items, no items, one key twice, an unknown field', async () => {
    const item = (i: number) => ({ idempotencyKey: `k-${i}`, parameters: { orderId: `x${i}`, amount: i } });
    const tooMany = expectProblem(await batch({ items: Array.from({ length: 21 }, (_, i) => item(i)) }), 400);
    expect(tooMany.errors.map((e: { path: string }) => e.path)).toContain('body/items');
    expectProblem(await batch({ items: [] }), 400);
    const twice = expectProblem(await batch({ items: [item(1), item(2), { ...item(3), idempotencyKey: 'k-1' }] }), 422);
    expect(twice.errors).toEqual([{ path: 'body/items/2/idempotencyKey', message: expect.stringContaining('item 0') }]);
    expectProblem(await batch({ items: [{ ...item(1), extra: true }] }), 400);
    expect(await order('x1')).toBeNull();
  }, 30_000);
});
