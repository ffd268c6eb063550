import { canonicalJson, ownValue } from '@onto/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/**
 * Names that Object.prototype answers for, used as a world's names (issue 19): an object type
 * `toString` keyed by a property `constructor`, a link type `constructor`, properties `valueOf`
 * and `hasOwnProperty`, derived properties and aggregate aliases named likewise, through control,
 * data and intelligence. Each was a wrong answer or a failure before the services looked up own
 * keys only: the key `constructor` absent from a PUT read as Object and was refused, a required
 * `hasOwnProperty` left out read as present, a property `valueOf` added to an object failed
 * intelligence's apply and data's diff. `__proto__` is no name (names start with a letter), and a
 * body carrying it is a 400, never a prototype.
 */

const ToString = {
  displayName: 'toString',
  primaryKey: 'constructor',
  properties: {
    constructor: { type: 'string', required: true },
    hasOwnProperty: { type: 'string', required: true },
    valueOf: { type: 'integer' },
  },
};
const Constructor = {
  displayName: 'constructor',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, valueOf: { type: 'integer' } },
};
const W = 'protos';

interface Read {
  properties: Record<string, unknown>;
  derived: Record<string, { value: unknown; error: unknown }>;
}

describe('names like Object.prototype’s members, across control, data and intelligence', () => {
  let s: IntelligenceStack;
  let token = '';

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world(W, {
      objectTypes: { toString: ToString, constructor: Constructor },
      linkTypes: { constructor: { from: 'toString', to: 'constructor', cardinality: 'ONE_TO_MANY' } },
    });
  }, 120_000);
  afterAll(async () => s?.close());

  const write = async (method: 'PUT' | 'PATCH', type: string, pk: string, properties: Record<string, unknown>) => {
    const res = await s.dataCall(method, `/v1/worlds/${W}/objects/${type}/${pk}`, { body: { properties } });
    expect(res.statusCode, res.body).toBeLessThan(300);
    token = String(res.headers['x-consistency-token']);
    return Number(token.replace('data=', ''));
  };
  const readUntil = (pk: string, what: string, ok: (o: Read) => boolean) =>
    s.until(
      `${pk}: ${what}`,
      async () => {
        const res = await s.intelCall('GET', `/v1/worlds/${W}/objects/toString/${pk}`, {
          headers: { 'x-consistency-token': token },
        });
        if (res.statusCode === 404) return undefined;
        expect(res.statusCode, res.body).toBe(200);
        const o = res.json() as Read;
        return ok(o) ? o : undefined;
      },
      30_000,
    );

  it('data keeps, requires and fills such properties as it does any other', async () => {
    // The key property `constructor` left out is filled from the path (it read as Object: 422).
    const created = await write('PUT', 'toString', 't-1', { hasOwnProperty: 'yes' });
    const got = await s.dataCall('GET', `/v1/worlds/${W}/objects/toString/t-1`);
    expect(got.statusCode, got.body).toBe(200);
    expect(got.json().properties).toEqual({ constructor: 't-1', hasOwnProperty: 'yes' });

    // A required `hasOwnProperty` left out is missing (it read as Object.prototype's method: accepted).
    const missing = await s.dataCall('PUT', `/v1/worlds/${W}/objects/toString/t-2`, {
      body: { properties: { constructor: 't-2' } },
    });
    expect(expectProblem(missing, 422).errors).toEqual([
      { path: '/properties/hasOwnProperty', message: 'is required' },
    ]);

    // A property only one side of a diff has is null on the other (it read as a function: a 500).
    const patched = await write('PATCH', 'toString', 't-1', { valueOf: 21 });
    const diff = await s.dataCall('GET', `/v1/worlds/${W}/diff?from=${created}&to=${patched}`);
    expect(diff.statusCode, diff.body).toBe(200);
    expect(diff.json().objects).toEqual([
      expect.objectContaining({
        type: 'toString',
        pk: 't-1',
        change: 'modified',
        properties: { valueOf: { old: null, new: 21 } },
      }),
    ]);
  });

  it('intelligence derives from them, aggregates over the link type `constructor`, and keeps a `__proto__` key as data', async () => {
    await write('PUT', 'constructor', 'k-1', { id: 'k-1', valueOf: 5 });
    await write('PUT', 'constructor', 'k-2', { id: 'k-2', valueOf: 7 });
    for (const to of ['k-1', 'k-2']) {
      const res = await s.dataCall('PUT', `/v1/worlds/${W}/links/constructor/t-1/${to}`);
      expect(res.statusCode, res.body).toBe(201);
      token = String(res.headers['x-consistency-token']);
    }
    const define = async (name: string, body: Record<string, unknown>) => {
      const res = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/${name}`, {
        body: { objectType: 'toString', ...body },
      });
      expect(res.statusCode, res.body).toBe(201);
    };
    await define('valueOf', { expression: 'self.valueOf * 2' });
    await define('constructor', {
      expression: 'agg.toString',
      aggregates: { toString: { function: 'sum', linkType: 'constructor', property: 'valueOf' } },
    });
    await define('hasOwnProperty', { expression: "{'__proto__': self.constructor, 'valueOf': derived.valueOf}" });
    // Written out as JSON: an object literal's `__proto__` would set a prototype, not a key.
    const wanted = '{"constructor":12,"hasOwnProperty":{"__proto__":"t-1","valueOf":42},"valueOf":42}';
    const derived = (o: Read) => Object.fromEntries(Object.entries(o.derived).map(([k, d]) => [k, d.value]));
    await readUntil('t-1', wanted, (o) => canonicalJson(derived(o)) === wanted);

    // A property `valueOf` added later is a change intelligence applies (it failed the apply).
    await write('PUT', 'toString', 't-3', { constructor: 't-3', hasOwnProperty: 'no' });
    await write('PATCH', 'toString', 't-3', { valueOf: 4 });
    const t3 = await readUntil('t-3', 'valueOf 8', (o) => ownValue(o.derived, 'valueOf')?.value === 8);
    expect(t3.properties).toEqual({ constructor: 't-3', hasOwnProperty: 'no', valueOf: 4 });
    expect(canonicalJson(ownValue(t3.derived, 'hasOwnProperty')?.value)).toBe('{"__proto__":"t-3","valueOf":8}');
  }, 120_000);

  it('`__proto__` is refused as a name and as a body key, never taken for the prototype', async () => {
    const type = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/__proto__`, { body: Constructor });
    expect(type.statusCode, type.body).toBe(400);
    const body = await s.dataCall('PUT', `/v1/worlds/${W}/objects/constructor/k-3`, {
      body: '{"properties":{"id":"k-3","__proto__":{"valueOf":1}}}',
      headers: { 'content-type': 'application/json' },
    });
    expect(body.statusCode, body.body).toBe(400);
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/constructor/k-3`)).statusCode).toBe(404);
  });
});
