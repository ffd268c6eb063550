import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, expectProblem, type Stack } from './stack.js';

const simple = (name: string) => ({
  displayName: name,
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, label: { type: 'string' } },
});
const W = 'graph';

describe('links', () => {
  let s: Stack;
  let editor: string;
  let viewer: string;
  const put = (path: string, token = editor) => s.dataCall('PUT', `/v1/worlds/${W}/${path}`, { token });
  const object = (type: string, pk: string, label = pk) =>
    s.dataCall('PUT', `/v1/worlds/${W}/objects/${type}/${pk}`, { token: editor, body: { properties: { label } } });
  const linkEvents = async (linkType: string) =>
    (
      await s.data.app.pg.query<{ body: string }>(
        `SELECT body FROM outbox WHERE topic LIKE '%onto.changes.links' AND partition_key LIKE $1 ORDER BY id`,
        [`${W}/${linkType}/%`],
      )
    ).rows.map((r) => JSON.parse(r.body));

  beforeAll(async () => {
    s = await dataStack();
    await s.world(W, {
      objectTypes: {
        Customer: simple('Customer'),
        Order: simple('Order'),
        Person: simple('Person'),
        Tag: simple('Tag'),
      },
      linkTypes: {
        placed: { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' },
        spouse: { from: 'Person', to: 'Person', cardinality: 'ONE_TO_ONE' },
        tagged: { from: 'Order', to: 'Tag', cardinality: 'MANY_TO_MANY' },
      },
    });
    editor = await s.user('eli', W, 'editor');
    viewer = await s.user('vera', W, 'viewer');
    for (const c of ['c1', 'c2']) expect((await object('Customer', c)).statusCode).toBe(201);
    for (let i = 0; i < 8; i++) expect((await object('Order', `o${i}`)).statusCode).toBe(201);
    for (const t of ['t1', 't2']) expect((await object('Tag', t)).statusCode).toBe(201);
    for (let i = 0; i < 12; i++) expect((await object('Person', `p${i}`)).statusCode).toBe(201);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('links existing objects once, enforcing the link type’s cardinality', async () => {
    const created = await put('links/placed/c1/o0');
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json()).toEqual({
      linkType: 'placed',
      from: { type: 'Customer', pk: 'c1' },
      to: { type: 'Order', pk: 'o0' },
      version: 1,
    });
    expect(created.headers['x-consistency-token']).toMatch(/^data=\d+$/);
    const again = await put('links/placed/c1/o0');
    expect(again.statusCode).toBe(200);
    expect(again.headers['x-consistency-token']).toBe(created.headers['x-consistency-token']);
    expect(await linkEvents('placed')).toHaveLength(1);

    // ONE_TO_MANY: a customer places many orders, an order has one customer.
    expect((await put('links/placed/c1/o1')).statusCode).toBe(201);
    const taken = expectProblem(await put('links/placed/c2/o0'), 409);
    expect(taken.existing).toEqual({ fromPk: 'c1', toPk: 'o0' });
    // MANY_TO_MANY: anything goes.
    for (const [o, t] of [
      ['o0', 't1'],
      ['o0', 't2'],
      ['o1', 't1'],
    ]) {
      expect((await put(`links/tagged/${o}/${t}`)).statusCode).toBe(201);
    }
    // Ends must exist, and be of the link type's object types.
    expectProblem(await put('links/placed/c9/o0'), 404);
    expectProblem(await put('links/placed/c1/o99'), 404);
    expectProblem(await put('links/placed/o0/c1'), 404);
    expectProblem(await put('links/nothing/c1/o0'), 404);
    expectProblem(await put('links/placed/c1/o2', viewer), 403);

    const [event] = await linkEvents('placed');
    expect(event).toMatchObject({
      type: 'link.created',
      world_id: W,
      key: `${W}/placed/c1%2Fo0`,
      version: 1,
      producer: 'data',
      payload: {
        type: 'placed',
        pk: 'c1/o0',
        from: { type: 'Customer', pk: 'c1' },
        to: { type: 'Order', pk: 'o0' },
        before: null,
        after: { from: { type: 'Customer', pk: 'c1' }, to: { type: 'Order', pk: 'o0' } },
        actor: 'eli',
      },
    });
  });

  it('lets exactly one of two concurrent ONE_TO_ONE links on the same object win', async () => {
    for (let round = 0; round < 3; round++) {
      const [a, b, c] = [`p${round * 3}`, `p${round * 3 + 1}`, `p${round * 3 + 2}`];
      // Same `from`, different `to`; then different `from`, same `to`.
      const results = await Promise.all([put(`links/spouse/${a}/${b}`), put(`links/spouse/${a}/${c}`)]);
      expect(results.map((r) => r.statusCode).sort(), results.map((r) => r.body).join()).toEqual([201, 409]);
      const winner = results[0]?.statusCode === 201 ? b : c;
      const loser = winner === b ? c : b;
      const other = await Promise.all([put(`links/spouse/${loser}/${winner}`), put(`links/spouse/${a}/${winner}`)]);
      expect(other.map((r) => r.statusCode).sort()).toEqual([200, 409]);
    }
    const { rows } = await s.data.app.pg.query(
      "SELECT from_pk, count(*)::int AS n FROM link_heads WHERE world_id = $1 AND link_type = 'spouse' AND NOT deleted GROUP BY from_pk",
      [W],
    );
    expect(rows.every((r) => r.n === 1)).toBe(true);
    expect(rows).toHaveLength(3);
  });

  it('deletes a link and creates it again, each with an event', async () => {
    expect((await put('links/tagged/o1/t2')).statusCode).toBe(201);
    const gone = await s.dataCall('DELETE', `/v1/worlds/${W}/links/tagged/o1/t2`, { token: editor });
    expect(gone.statusCode, gone.body).toBe(204);
    expect(gone.headers.etag).toBe('"2"');
    expectProblem(await s.dataCall('DELETE', `/v1/worlds/${W}/links/tagged/o1/t2`, { token: editor }), 404);
    const back = await put('links/tagged/o1/t2');
    expect(back.statusCode).toBe(201);
    expect(back.json().version).toBe(3);
    const events = (await linkEvents('tagged')).filter((e) => e.payload.pk === 'o1/t2');
    expect(events.map((e) => [e.type, e.version])).toEqual([
      ['link.created', 1],
      ['link.deleted', 2],
      ['link.created', 3],
    ]);
    expectProblem(
      await s.dataCall('DELETE', `/v1/worlds/${W}/links/tagged/o1/t2`, {
        token: editor,
        headers: { 'if-match': '"2"' },
      }),
      412,
    );
  });

  it('deletes the links of a deleted object in the same transaction, each with its event', async () => {
    expect((await put('links/placed/c2/o5')).statusCode).toBe(201);
    expect((await put('links/tagged/o5/t1')).statusCode).toBe(201);
    const deleted = await s.dataCall('DELETE', `/v1/worlds/${W}/objects/Order/o5`, { token: editor });
    expect(deleted.statusCode, deleted.body).toBe(204);
    const { rows } = await s.data.app.pg.query(
      `SELECT link_type, from_pk, to_pk, deleted, version FROM link_heads
        WHERE world_id = $1 AND (to_pk = 'o5' OR from_pk = 'o5') ORDER BY link_type`,
      [W],
    );
    expect(rows).toEqual([
      { link_type: 'placed', from_pk: 'c2', to_pk: 'o5', deleted: true, version: 2 },
      { link_type: 'tagged', from_pk: 'o5', to_pk: 't1', deleted: true, version: 2 },
    ]);
    const placed = (await linkEvents('placed')).filter((e) => e.payload.pk === 'c2/o5');
    const tagged = (await linkEvents('tagged')).filter((e) => e.payload.pk === 'o5/t1');
    expect([...placed, ...tagged].map((e) => e.type)).toEqual([
      'link.created',
      'link.deleted',
      'link.created',
      'link.deleted',
    ]);
    // The link's deletion and the object's share one request.
    const objectDeleted = (
      await s.data.app.pg.query<{ body: string }>(
        `SELECT body FROM outbox WHERE partition_key = $1 AND body LIKE '%object.deleted%'`,
        [`${W}/Order/o5`],
      )
    ).rows.map((r) => JSON.parse(r.body))[0];
    expect(placed[1].payload.requestId).toBe(objectDeleted.payload.requestId);
    // A new order o5 starts without links, and c2 is free to take it again.
    expect((await object('Order', 'o5')).statusCode).toBe(201);
    const traversal = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o5/links/placed`);
    expect(traversal.json().links).toEqual([]);
    expect((await put('links/placed/c1/o5')).statusCode).toBe(201);
  });

  it('traverses links both ways, paginated, with the objects at the other end', async () => {
    for (const o of ['o2', 'o3', 'o4', 'o6', 'o7']) expect((await put(`links/placed/c1/${o}`)).statusCode).toBe(201);
    const pages: string[][] = [];
    let cursor: string | null = null;
    do {
      const res = await s.dataCall(
        'GET',
        `/v1/worlds/${W}/objects/Customer/c1/links/placed?limit=3${cursor ? `&cursor=${cursor}` : ''}`,
        { token: viewer },
      );
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toMatchObject({ linkType: 'placed', direction: 'outgoing', type: 'Order' });
      pages.push(res.json().links.map((l: { pk: string }) => l.pk));
      cursor = res.json().next;
    } while (cursor);
    expect(pages).toEqual([
      ['o0', 'o1', 'o2'],
      ['o3', 'o4', 'o5'],
      ['o6', 'o7'],
    ]);
    const one = await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1/links/placed?limit=1`);
    expect(one.json().links[0]).toEqual({
      pk: 'o0',
      linkVersion: 1,
      object: { version: 1, properties: { id: 'o0', label: 'o0' } },
    });
    const incoming = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o3/links/placed`);
    expect(incoming.json()).toMatchObject({
      direction: 'incoming',
      type: 'Customer',
      links: [{ pk: 'c1' }],
      next: null,
    });
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o3/links/placed?direction=outgoing`), 400);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Tag/t1/links/placed`), 400);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c9/links/placed`), 404);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1/links/nothing`), 404);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1/links/placed?cursor=xyz`), 400);
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1/links/placed?limit=5000`), 400);
    expectProblem(await s.dataCall('PUT', `/v1/worlds/${W}/links/placed/c1/a%00b`, { token: editor }), 400);
  });

  it('drops everything of a world when control deletes it', async () => {
    const deleting = await s.controlCall('DELETE', `/v1/worlds/${W}`);
    expect(deleting.statusCode, deleting.body).toBe(202);
    await s.until('the world dropped in data', async () => {
      const { rowCount } = await s.data.app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [W]);
      return rowCount === 0 ? true : undefined;
    });
    for (const table of ['object_heads', 'object_history', 'link_heads', 'link_history', 'schema_versions']) {
      const { rows } = await s.data.app.pg.query(`SELECT count(*)::int AS n FROM ${table} WHERE world_id = $1`, [W]);
      expect(rows[0]?.n, table).toBe(0);
    }
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1`), 404);
    expectProblem(await object('Customer', 'c3'), 404);
  });
});
