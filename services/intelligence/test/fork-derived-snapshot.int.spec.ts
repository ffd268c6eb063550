import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * A fork computes with the definitions of its fork point (issue 35, docs/adr/0045, 0068): a base
 * that changes or deletes a derived property afterwards, with no data write in between, changes
 * nothing a fork answers for its derived values — neither for a fork made before the change nor
 * for one made after it at a ref before it, nor through a chain.
 */

const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};

interface Value {
  value: unknown;
  stale: boolean;
  definitionVersion: number | null;
}

describe("a fork's derived values are its fork point's", () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world('base', { objectTypes: { Order } });
  }, 120_000);
  afterAll(async () => s?.close());

  async function define(world: string, name: string, expression: string) {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/derived-properties/${name}`, {
      body: { objectType: 'Order', expression },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
  }
  async function order(world: string, pk: string, amount: number) {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/Order/${pk}`, {
      body: { properties: { id: pk, amount } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
  }
  async function derived(world: string, pk: string): Promise<Record<string, Value>> {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/objects/Order/${pk}/derived`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json().derived;
  }
  /** name → [value, definitionVersion] of current (not stale) values, once they are exactly these. */
  const settle = (world: string, pk: string, want: Record<string, [unknown, number]>) => {
    let last = '';
    return s
      .until(`${world} ${pk} derived ${JSON.stringify(want)}`, async () => {
        const res = await s.intelCall('GET', `/v1/worlds/${world}/objects/Order/${pk}/derived`);
        if (res.statusCode !== 200) return undefined;
        const got = res.json().derived as Record<string, Value>;
        const shown = Object.fromEntries(
          Object.entries(got).map(([n, v]) => [n, v.stale ? ['stale', v.value] : [v.value, v.definitionVersion]]),
        );
        last = JSON.stringify(shown);
        return last === JSON.stringify(want) ? got : undefined;
      })
      .catch((error: Error) => {
        throw new Error(`${error.message}; last answer ${last}`);
      });
  };
  async function tag(world: string, name: string) {
    const res = await s.controlCall('PUT', `/v1/worlds/${world}/tags/${name}`, { body: {} });
    expect(res.statusCode, res.body).toBe(201);
    await s.until(`tag ${world}/${name} COMPLETE`, async () =>
      (await s.controlCall('GET', `/v1/worlds/${world}/tags/${name}`)).json().status === 'COMPLETE' ? true : undefined,
    );
  }
  async function fork(id: string, from: string, ref?: string) {
    const res = await s.controlCall('POST', '/v1/worlds', { body: { id, from: { world: from, ...(ref && { ref }) } } });
    expect(res.statusCode, res.body).toBe(202);
    await s.until(`${id} READY`, async () =>
      (await s.controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
    );
  }

  it('a base changing and deleting derived properties with no data write leaves its forks as they were', async () => {
    await define('base', 'double', 'self.amount * 2');
    await define('base', 'half', 'self.amount / 2');
    await order('base', 'o1', 500);
    const atFork = { double: [1000, 1], half: [250, 1] } as Record<string, [unknown, number]>;
    await settle('base', 'o1', atFork);
    await tag('base', 't');
    await fork('early', 'base');
    await settle('early', 'o1', atFork);
    // A chain: `deep` forks `early`, reading the base through it.
    await fork('deep', 'early');
    await settle('deep', 'o1', atFork);

    // The base changes double and deletes half; no data is written.
    await define('base', 'double', 'self.amount * 3');
    expect((await s.intelCall('DELETE', '/v1/worlds/base/derived-properties/half')).statusCode).toBe(204);
    await settle('base', 'o1', { double: [1500, 2] });

    // Forks made before the change, and one made after it at a tag before it, answer the fork point's values.
    await fork('late', 'base', 't');
    for (const world of ['early', 'deep', 'late']) {
      const got = await derived(world, 'o1');
      expect(
        Object.fromEntries(Object.entries(got).map(([n, v]) => [n, [v.value, v.definitionVersion, v.stale]])),
        world,
      ).toEqual({ double: [1000, 1, false], half: [250, 1, false] });
      // The object read answers the same values.
      const object = await s.intelCall('GET', `/v1/worlds/${world}/objects/Order/o1`);
      expect(object.json().derived).toEqual(got);
    }

    // A fork's own write computes with its own definitions; the base's later write is not the fork's.
    await order('early', 'o1', 40);
    await settle('early', 'o1', { double: [80, 1], half: [20, 1] });
    await order('base', 'o1', 7);
    await settle('base', 'o1', { double: [21, 2] });
    const late = await derived('late', 'o1');
    expect([late.double?.value, late.half?.value]).toEqual([1000, 250]);
  }, 180_000);
});
