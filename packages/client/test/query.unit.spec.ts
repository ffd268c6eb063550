import { describe, expect, it } from 'vitest';
import { type Fetch, OntoClient } from '../src/index.js';

/**
 * The query builder and aggregations against a fake fetch: data's query/aggregate endpoints are
 * built in another branch, with this HTTP contract; everything else is proven end to end.
 */
interface Order {
  id: string;
  amount: number;
  status?: 'open' | 'shipped' | null;
}
interface Shop {
  objects: { Order: { properties: Order; series: object; derived: object; links: 'placedBy' } };
  links: { placedBy: { from: 'Order'; to: 'Customer' } };
  actions: Record<string, never>;
}

function fakeFetch(answers: ((body: Record<string, unknown>) => unknown)[]) {
  const sent: { url: string; body: Record<string, unknown>; headers: Record<string, string> }[] = [];
  const fetch: Fetch = async (url, init) => {
    const body = init.body ? JSON.parse(init.body) : {};
    sent.push({ url, body, headers: init.headers });
    const answer = answers.shift();
    if (!answer) throw new Error(`unexpected call to ${url}`);
    return { status: 200, headers: { get: () => null }, text: async () => JSON.stringify(answer(body)) };
  };
  return { fetch, sent };
}

const world = (fetch: Fetch) =>
  new OntoClient({
    control: 'http://c',
    data: 'http://d',
    intelligence: 'http://i',
    accessToken: 't',
    fetch,
    checkSchema: false,
  }).world<Shop>({
    id: 'shop',
    schemaVersion: 1,
    signature: {},
  });

describe('object-set queries', () => {
  it('sends the where, order, selection and page size, and follows nextPageToken at the first page commit', async () => {
    const page = (pks: string[], next: string | null) => () => ({
      objects: pks.map((pk) => ({ type: 'Order', pk, version: 1, properties: { id: pk, amount: 5 } })),
      nextPageToken: next,
      commit: 42,
    });
    const { fetch, sent } = fakeFetch([page(['a', 'b'], 'tok'), page(['c'], null)]);
    const query = world(fetch)
      .objects.Order.query()
      .where({ amount: { $gte: 100 }, status: 'open' })
      .where({ $link: { type: 'placedBy', where: { tier: 'gold' } } })
      .orderBy('amount', 'desc')
      .select('id', 'amount')
      .pageSize(2);
    const pks: string[] = [];
    for await (const o of query) pks.push(o.pk);
    expect(pks).toEqual(['a', 'b', 'c']);
    expect(sent.map((s) => s.url)).toEqual([
      'http://d/v1/worlds/shop/objects/Order/query',
      'http://d/v1/worlds/shop/objects/Order/query',
    ]);
    expect(sent[0]?.body).toEqual({
      where: {
        $and: [{ amount: { $gte: 100 }, status: 'open' }, { $link: { type: 'placedBy', where: { tier: 'gold' } } }],
      },
      orderBy: [{ property: 'amount', direction: 'desc' }],
      select: ['id', 'amount'],
      pageSize: 2,
    });
    // The next page reads the same commit as the first.
    expect(sent[1]?.body).toMatchObject({ pageToken: 'tok', pageSize: 2 });
    // The token carries the pinned commit and is bound to the body as first sent: no `at` added.
    expect(sent[1]?.body).not.toHaveProperty('at');
    expect(sent[0]?.headers.authorization).toBe('Bearer t');
  });

  it('refuses a page size outside 1 to 1000 before sending anything', () => {
    const { fetch, sent } = fakeFetch([]);
    expect(() => world(fetch).objects.Order.query().pageSize(1001)).toThrow(RangeError);
    expect(sent).toEqual([]);
  });

  it('aggregates with groups and metrics, typed by metric name', async () => {
    const { fetch, sent } = fakeFetch([
      () => ({ groups: [{ key: { status: 'open' }, metrics: { n: 2, total: 1630 } }], commit: 7 }),
    ]);
    const result = await world(fetch).objects.Order.aggregate({
      where: { amount: { $gt: 0 } },
      groupBy: [{ property: 'status', type: 'exact', maxGroups: 10 }],
      metrics: [
        { name: 'n', op: 'count' },
        { name: 'total', op: 'sum', property: 'amount' },
      ],
    });
    expect(sent[0]?.url).toBe('http://d/v1/worlds/shop/objects/Order/aggregate');
    expect(sent[0]?.body).toEqual({
      where: { amount: { $gt: 0 } },
      groupBy: [{ property: 'status', type: 'exact', maxGroups: 10 }],
      metrics: [
        { name: 'n', op: 'count' },
        { name: 'total', op: 'sum', property: 'amount' },
      ],
    });
    expect(result.groups[0]?.metrics.total).toBe(1630);
    expect(result.commit).toBe(7);
  });
});
