import { expect } from 'vitest';
import { dataStack } from '../../data/test/stack.js';

export { expectProblem } from '../../data/test/stack.js';

/** control, data and intelligence on a topic prefix of their own (see dataStack). */
export const intelligenceStack = (
  opts: {
    partitions?: number;
    dataEnv?: Record<string, string>;
    controlEnv?: Record<string, string>;
    intelligenceEnv?: Record<string, string>;
  } = {},
) => dataStack({ ...opts, intelligence: true });

export type IntelligenceStack = Awaited<ReturnType<typeof intelligenceStack>>;

/** Forks `id` from `from` (at `ref`, else now) through control; waits until control says READY. */
export async function forkWorld(s: IntelligenceStack, id: string, from: string, ref?: string): Promise<void> {
  const res = await s.controlCall('POST', '/v1/worlds', {
    body: { id, from: { world: from, ...(ref ? { ref } : {}) } },
  });
  expect(res.statusCode, res.body).toBe(202);
  await s.until(`${id} READY`, async () =>
    (await s.controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
  );
}

/** An order, and an action type on it that data refuses at its second step (a string for an integer). */
export const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', required: true },
    status: { type: { type: 'enum', values: ['open', 'closed'] } },
  },
};
export const reprice = {
  parameters: { orderId: { type: 'string', required: true }, price: { type: 'string', required: true } },
  edits: [
    { op: 'modifyObject', objectType: 'Order', pk: { param: 'orderId' }, values: { status: { value: 'closed' } } },
    { op: 'modifyObject', objectType: 'Order', pk: { param: 'orderId' }, values: { amount: { param: 'price' } } },
  ],
};
