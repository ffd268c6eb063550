import { inTransaction, newEvent, Outbox, TOPICS } from '@onto/shared';
import { afterAll, assert, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, expectProblem, forkThroughControl, type Stack } from './stack.js';

const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', indexed: true },
    status: { type: 'string', indexed: true },
  },
};
const Customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };

describe('worlds as branches', () => {
  let s: Stack;
  const call = (method: 'GET' | 'PUT' | 'PATCH' | 'DELETE', world: string, path: string, body?: unknown) =>
    s.dataCall(method, `/v1/worlds/${world}/${path}`, body === undefined ? {} : { body });
  const put = async (world: string, type: string, pk: string, properties: Record<string, unknown>) => {
    const res = await call('PUT', world, `objects/${type}/${pk}`, { properties });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return { version: res.json().version as number, commit: commitOf(res) };
  };
  const commitOf = (res: { headers: Record<string, unknown> }) =>
    Number(String(res.headers['x-consistency-token']).replace('data=', ''));
  const head = async () =>
    Number((await s.data.app.pg.query<{ c: string }>('SELECT last_value AS c FROM data_seq')).rows[0]?.c ?? 0);
  const get = (world: string, type: string, pk: string, at?: string | number) =>
    call('GET', world, `objects/${type}/${pk}${at === undefined ? '' : `?at=${encodeURIComponent(String(at))}`}`);
  const list = async (world: string, query: string) => {
    const res = await call('GET', world, `objects/Order?${query}`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json() as {
      objects: { pk: string; version: number; properties: Record<string, unknown> }[];
      next: string | null;
    };
  };
  /** Every page of a listing, following `next`. */
  const listAll = async (world: string, query: string, limit = 2) => {
    const pks: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Awaited<ReturnType<typeof list>> = await list(
        world,
        `${query}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`,
      );
      pks.push(...page.objects.map((o) => `${o.pk}@${o.version}`));
      cursor = page.next;
    } while (cursor);
    return pks;
  };
  const linked = async (world: string, customer: string, at?: number) => {
    const res = await call(
      'GET',
      world,
      `objects/Customer/${customer}/links/placed?limit=1${at === undefined ? '' : `&at=${at}`}`,
    );
    expect(res.statusCode, res.body).toBe(200);
    const pks: string[] = res.json().links.map((l: { pk: string }) => l.pk);
    let next = res.json().next as string | null;
    while (next) {
      const page = await call(
        'GET',
        world,
        `objects/Customer/${customer}/links/placed?limit=1&cursor=${next}${at === undefined ? '' : `&at=${at}`}`,
      );
      expect(page.statusCode, page.body).toBe(200);
      pks.push(...page.json().links.map((l: { pk: string }) => l.pk));
      next = page.json().next;
    }
    return pks;
  };
  /** This stack has no intelligence: control is told the world is READY once data provisioned it. */
  const ready = async (id: string) => {
    await s.until(`world ${id} in data`, async () =>
      (await s.data.app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [id])).rowCount ? true : undefined,
    );
    await s.control.app.pg.query(`UPDATE worlds SET status = 'READY' WHERE id = $1`, [id]);
  };
  /** A fork made through control (at now): control copies the schema, data records the base. */
  const fork = (id: string, from: string) => forkThroughControl(s, id, from);
  /** world.created as control would send it with a ref; the schema copied as control would. */
  const forkAtRef = async (id: string, from: string, ref: { commit?: number; instant?: string }) => {
    await inTransaction(s.control.app.pg, async (tx) => {
      await new Outbox(tx, s.prefix).add({
        event: newEvent({
          type: 'world.created',
          worldId: id,
          key: id,
          version: 0,
          producer: 'control',
          producerSeq: 0,
          payload: { from: { world: from, schemaVersion: 1, ref }, createdBy: 'test' },
        }),
        key: TOPICS['onto.worlds'].key({ worldId: id }),
      });
    });
  };

  const commits: Record<string, number> = {};

  beforeAll(async () => {
    s = await dataStack();
    await s.world('base', {
      objectTypes: { Order, Customer },
      linkTypes: { placed: { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' } },
    });
    await put('base', 'Customer', 'c1', {});
    for (let i = 1; i <= 5; i++) await put('base', 'Order', `o${i}`, { amount: i * 10, status: 'open' });
    expect((await call('PUT', 'base', 'links/placed/c1/o1')).statusCode).toBe(201);
    expect((await call('PUT', 'base', 'links/placed/c1/o2')).statusCode).toBe(201);
    commits.created = await head();
    commits.o1v2 = (await put('base', 'Order', 'o1', { amount: 11, status: 'open' })).commit;
    commits.o1v3 = (await put('base', 'Order', 'o1', { amount: 12, status: 'paid' })).commit;
    const deleted = await call('DELETE', 'base', 'objects/Order/o5');
    expect(deleted.statusCode).toBe(204);
    commits.o5deleted = commitOf(deleted);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('a fork sees every object and link of its base at the fork point, with their versions, copying nothing', async () => {
    commits.child = await fork('child', 'base');
    assert.isDefined(commits.o5deleted, 'beforeAll deleted o5');
    expect(commits.child).toBeGreaterThanOrEqual(commits.o5deleted);
    const { rows } = await s.data.app.pg.query(
      `SELECT (SELECT count(*) FROM object_heads WHERE world_id = 'child')::int AS heads,
              (SELECT count(*) FROM link_heads WHERE world_id = 'child')::int AS links`,
    );
    expect(rows[0]).toEqual({ heads: 0, links: 0 });
    const o1 = await get('child', 'Order', 'o1');
    expect(o1.statusCode, o1.body).toBe(200);
    expect(o1.json()).toMatchObject({ version: 3, properties: { id: 'o1', amount: 12, status: 'paid' } });
    expectProblem(await get('child', 'Order', 'o5'), 404);
    expect(await listAll('child', 'sort=id')).toEqual(['o1@3', 'o2@1', 'o3@1', 'o4@1']);
    expect(await listAll('child', 'filter=status:eq:open&sort=-amount')).toEqual(['o4@1', 'o3@1', 'o2@1']);
    expect(await linked('child', 'c1')).toEqual(['o1', 'o2']);
  });

  it('writes after the fork stay on their side: copy on write with the base version, tombstones and links', async () => {
    // If-Match compares with the inherited version; the child's head continues it.
    const stale = await s.dataCall('PUT', '/v1/worlds/child/objects/Order/o1', {
      body: { properties: { amount: 1 } },
      headers: { 'if-match': '"2"' },
    });
    expect(expectProblem(stale, 412).currentVersion).toBe(3);
    const updated = await s.dataCall('PATCH', '/v1/worlds/child/objects/Order/o1', {
      body: { properties: { amount: 13 } },
      headers: { 'if-match': '"3"' },
    });
    expect(updated.statusCode, updated.body).toBe(200);
    expect(updated.json()).toMatchObject({ version: 4, properties: { amount: 13, status: 'paid' } });
    const events = await s.data.app.pg.query<{ body: string }>(
      `SELECT body FROM outbox WHERE topic LIKE '%onto.changes.objects' AND partition_key = 'child/Order/o1'`,
    );
    expect(events.rows.map((r) => JSON.parse(r.body).payload)).toMatchObject([
      { version: 4, before: { amount: 12, status: 'paid' }, after: { amount: 13 } },
    ]);
    // Deleting an inherited object writes the child's tombstone, and deletes its inherited links there.
    const removed = await call('DELETE', 'child', 'objects/Order/o2');
    expect(removed.statusCode, removed.body).toBe(204);
    expect(removed.headers.etag).toBe('"2"');
    expect(await linked('child', 'c1')).toEqual(['o1']);
    expect(await linked('base', 'c1')).toEqual(['o1', 'o2']);
    expect((await call('PUT', 'child', 'links/placed/c1/o3')).statusCode).toBe(201);
    await put('child', 'Order', 'o6', { amount: 60, status: 'open' });
    await put('base', 'Order', 'o3', { amount: 31, status: 'open' });
    await put('base', 'Order', 'o7', { amount: 70, status: 'open' });

    expect(await listAll('child', 'sort=id')).toEqual(['o1@4', 'o3@1', 'o4@1', 'o6@1']);
    expect(await listAll('base', 'sort=id')).toEqual(['o1@3', 'o2@1', 'o3@2', 'o4@1', 'o7@1']);
    expect(await listAll('child', 'sort=amount', 3)).toEqual(['o1@4', 'o3@1', 'o4@1', 'o6@1']);
    expect(await linked('child', 'c1')).toEqual(['o1', 'o3']);
    expect(await linked('base', 'c1')).toEqual(['o1', 'o2']);
    // Re-creating the deleted object in the child continues its version.
    expect((await put('child', 'Order', 'o2', { amount: 21 })).version).toBe(3);
    expect(await linked('child', 'c1')).toEqual(['o1', 'o3']);
  });

  it('reads at a commit or an instant: objects, lists with filters and cursors, links; deleted then re-created', async () => {
    expect((await get('base', 'Order', 'o1', commits.created)).json()).toMatchObject({
      version: 1,
      properties: { amount: 10 },
    });
    expect((await get('base', 'Order', 'o1', commits.o1v2)).json()).toMatchObject({
      version: 2,
      properties: { amount: 11 },
    });
    expect((await get('base', 'Order', 'o5', commits.o1v3)).json()).toMatchObject({ version: 1 });
    expectProblem(await get('base', 'Order', 'o5', commits.o5deleted), 404);
    expect(await listAll('base', `sort=id&at=${commits.o1v2}`)).toEqual(['o1@2', 'o2@1', 'o3@1', 'o4@1', 'o5@1']);
    expect(await listAll('base', `filter=amount:gte:20&sort=-amount&at=${commits.o1v2}`)).toEqual([
      'o5@1',
      'o4@1',
      'o3@1',
      'o2@1',
    ]);
    // The child at its fork point is the base then; before it, the child did not exist.
    expect(await listAll('child', `sort=id&at=${commits.child}`)).toEqual(['o1@3', 'o2@1', 'o3@1', 'o4@1']);
    expect(await linked('child', 'c1', commits.child)).toEqual(['o1', 'o2']);
    expectProblem(await get('child', 'Order', 'o1', commits.created), 422);
    // An instant: now reads as the head.
    const now = new Date(Date.now() - 1).toISOString();
    expect((await get('child', 'Order', 'o2', now)).json()).toMatchObject({ version: 3 });
    // A cursor keeps the commit of its first page, even when the world moves on.
    const first = await list('base', `sort=id&limit=2&at=${commits.o1v2}`);
    await put('base', 'Order', 'o2', { amount: 22 });
    const second = await list('base', `sort=id&limit=2&at=${commits.o1v2}&cursor=${first.next}`);
    expect(second.objects.map((o) => `${o.pk}@${o.version}`)).toEqual(['o3@1', 'o4@1']);
    const currentSecond = await list('base', `sort=id&limit=2&cursor=${(await list('base', 'sort=id&limit=2')).next}`);
    expect(currentSecond.objects.map((o) => `${o.pk}@${o.version}`)).toEqual(['o3@2', 'o4@1']);
  });

  it("an object's history: its own versions, then its base's up to the fork point, paged; deletions included", async () => {
    type Version = { version: number; seq: number; deleted: boolean; properties: unknown; world: string };
    const history = async (world: string, pk: string, limit = 2) => {
      const out: Version[] = [];
      let cursor: string | null = null;
      do {
        const res = await call(
          'GET',
          world,
          `objects/Order/${pk}/history?limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`,
        );
        expect(res.statusCode, res.body).toBe(200);
        out.push(...res.json().versions);
        cursor = res.json().next;
      } while (cursor);
      return out;
    };
    const short = (v: Version) => `${v.world}:v${v.version}${v.deleted ? ' deleted' : ''}`;
    expect((await history('child', 'o1')).map(short)).toEqual(['child:v4', 'base:v3', 'base:v2', 'base:v1']);
    expect((await history('base', 'o1')).map(short)).toEqual(['base:v3', 'base:v2', 'base:v1']);
    // the base's writes after the fork point are not the child's history
    expect((await history('child', 'o3')).map(short)).toEqual(['base:v1']);
    expect((await history('base', 'o3', 1)).map(short)).toEqual(['base:v2', 'base:v1']);
    const o2 = await history('child', 'o2', 1);
    expect(o2.map(short)).toEqual(['child:v3', 'child:v2 deleted', 'base:v1']);
    expect(o2[1]?.properties).toBeNull();
    // each version's seq reads the object as it was
    const v2 = (await history('base', 'o1')).find((v) => v.version === 2);
    expect((await get('base', 'Order', 'o1', v2?.seq)).json()).toMatchObject({
      version: 2,
      properties: { amount: 11 },
    });
    expect(v2?.seq).toBe(commits.o1v2);
    // newest first by commit, each commit once
    const seqs = (await history('child', 'o1')).map((v) => v.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => b - a));
    expectProblem(await call('GET', 'child', 'objects/Order/never/history'), 404);
    expectProblem(await call('GET', 'child', 'objects/Nope/o1/history'), 404);
    expect(
      expectProblem(await call('GET', 'child', 'objects/Order/o1/history?cursor=bogus'), 400).errors[0].path,
    ).toMatch(/cursor/);
  });

  it('refuses bad refs and foreign cursors as problem+json naming the field', async () => {
    const future = expectProblem(await get('base', 'Order', 'o1', (await head()) + 1000), 404);
    expect(future.errors[0].path).toBe('querystring/at');
    expect(expectProblem(await get('base', 'Order', 'o1', 'release-1'), 404).detail).toMatch(/no tag release-1/);
    expect(expectProblem(await get('base', 'Order', 'o1', '2026-13-45T00:00:00Z'), 400).errors[0].path).toBe(
      'querystring/at',
    );
    expect(expectProblem(await get('base', 'Order', 'o1', '2026-01-01T00:00:00'), 400).errors[0].path).toBe(
      'querystring/at',
    );
    expectProblem(await get('base', 'Order', 'o1', new Date(Date.now() + 3_600_000).toISOString()), 422);
    expectProblem(await get('base', 'Order', 'o1', '2000-01-01T00:00:00Z'), 422);
    const page = await list('base', 'sort=id&limit=1');
    const foreign = await call('GET', 'base', `objects/Order?sort=-amount&limit=1&cursor=${page.next}`);
    expect(expectProblem(foreign, 400).errors[0].path).toBe('querystring/cursor');
    const otherAt = await call('GET', 'base', `objects/Order?sort=id&limit=1&at=${commits.o1v2}&cursor=${page.next}`);
    expectProblem(otherAt, 400);
  });

  it('fork of a fork of a fork: each level reads up the chain at its fork point', async () => {
    await put('child', 'Order', 'o4', { amount: 41 });
    commits.grand = await fork('grand', 'child');
    await put('grand', 'Order', 'o4', { amount: 42 });
    await put('child', 'Order', 'o4', { amount: 43 });
    expect((await call('DELETE', 'grand', 'objects/Order/o1')).statusCode).toBe(204);
    commits.great = await fork('great', 'grand');
    await put('grand', 'Order', 'o6', { amount: 61 });
    await put('great', 'Order', 'o8', { amount: 80 });
    expect(await listAll('great', 'sort=id')).toEqual(['o2@3', 'o3@1', 'o4@3', 'o6@1', 'o8@1']);
    expect((await get('great', 'Order', 'o4')).json().properties.amount).toBe(42);
    expect((await get('great', 'Order', 'o6')).json().version).toBe(1);
    expect((await get('grand', 'Order', 'o6')).json().version).toBe(2);
    expectProblem(await get('great', 'Order', 'o1'), 404);
    expect((await get('child', 'Order', 'o1')).json().version).toBe(4);
    // Reads at refs before each fork point, through each level.
    expect(await listAll('great', `sort=id&at=${commits.great}`)).toEqual(['o2@3', 'o3@1', 'o4@3', 'o6@1']);
    expect(await listAll('grand', `sort=id&at=${commits.grand}`)).toEqual(['o1@4', 'o2@3', 'o3@1', 'o4@2', 'o6@1']);
    expect(await listAll('child', `sort=id&at=${commits.child}`)).toEqual(['o1@3', 'o2@1', 'o3@1', 'o4@1']);
    expect(await listAll('great', 'filter=amount:gt:40&sort=amount')).toEqual(['o4@3', 'o6@1', 'o8@1']);
    expect(await linked('great', 'c1')).toEqual(['o3']);
    // Writing a link between objects inherited from two levels up.
    expect((await call('PUT', 'great', 'links/placed/c1/o4')).statusCode).toBe(201);
    expect(await linked('great', 'c1')).toEqual(['o3', 'o4']);
    expect(await linked('grand', 'c1')).toEqual(['o3']);
    // Deleting an inherited link writes the fork's tombstone; a second delete finds none.
    const unlinked = await s.dataCall('DELETE', '/v1/worlds/great/links/placed/c1/o3', {
      headers: { 'if-match': '"1"' },
    });
    expect(unlinked.statusCode, unlinked.body).toBe(204);
    expectProblem(await call('DELETE', 'great', 'links/placed/c1/o3'), 404);
    expect(await linked('great', 'c1')).toEqual(['o4']);
    expect(await linked('grand', 'c1')).toEqual(['o3']);
    expect(await linked('great', 'c1', commits.great)).toEqual(['o3']);
  });

  it('forks at a commit or an instant of the base through world.created; a ref data cannot resolve fails the world', async () => {
    await forkAtRef('past', 'base', { commit: commits.o1v2 });
    const base = await s.until('past provisioned', async () => {
      const { rows } = await s.data.app.pg.query<{ base_seq: string }>(`SELECT base_seq FROM worlds WHERE id = 'past'`);
      return rows[0] ? Number(rows[0].base_seq) : undefined;
    });
    expect(base).toBe(commits.o1v2);
    await s.data.app.pg.query(
      `INSERT INTO schema_versions (world_id, version, document, event_id)
       SELECT 'past', version, document, event_id FROM schema_versions WHERE world_id = 'base'`,
    );
    expect((await get('past', 'Order', 'o1')).json()).toMatchObject({ version: 2 });
    expect((await get('past', 'Order', 'o5')).json()).toMatchObject({ version: 1 });
    expect(await listAll('past', `sort=id&at=${commits.o1v2}`)).toEqual(['o1@2', 'o2@1', 'o3@1', 'o4@1', 'o5@1']);
    expectProblem(await get('past', 'Order', 'o1', commits.created), 422);

    // An instant: the greatest commit of the base written at or before it.
    const { rows: times } = await s.data.app.pg.query<{ at: string }>(
      `SELECT to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
         FROM object_history WHERE world_id = 'base' AND type = 'Order' AND pk = 'o1' AND version = 2`,
    );
    const instant = times[0]?.at as string;
    expect((await get('base', 'Order', 'o1', instant)).json()).toMatchObject({ version: 2 });
    await forkAtRef('then', 'base', { instant });
    expect(
      await s.until('then provisioned', async () => {
        const { rows } = await s.data.app.pg.query<{ base_seq: string }>(
          `SELECT base_seq FROM worlds WHERE id = 'then'`,
        );
        return rows[0] ? Number(rows[0].base_seq) : undefined;
      }),
    ).toBe(commits.o1v2);

    await forkAtRef('ahead', 'base', { commit: (await head()) + 1000 });
    await forkAtRef('orphan', 'nowhere', {});
    const replies = await s.records('onto.storage', (seen) =>
      ['ahead', 'orphan'].every((w) => seen.some((r) => r.event.world_id === w)),
    );
    const failed = replies.filter((r) => ['ahead', 'orphan'].includes(r.event.world_id));
    expect(failed.map((r) => [r.event.world_id, r.event.type, r.event.payload.field])).toEqual(
      expect.arrayContaining([
        ['ahead', 'world.provision.failed', '/from/ref'],
        ['orphan', 'world.provision.failed', '/from/world'],
      ]),
    );
    const past = replies.find((r) => r.event.world_id === 'past');
    // The reply names the fork point, and the world's start: its first commit (the fork point) and when (docs/adr/0069).
    const { rows: started } = await s.data.app.pg.query<{ at: string }>(
      `SELECT to_char(provisioned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM worlds WHERE id = 'past'`,
    );
    expect(past?.event.payload).toEqual({
      service: 'data',
      base: { world: 'base', commit: commits.o1v2 },
      created: { commit: commits.o1v2, at: started[0]?.at },
    });
    const { rowCount } = await s.data.app.pg.query(`SELECT 1 FROM worlds WHERE id IN ('ahead', 'orphan')`);
    expect(rowCount).toBe(0);
  });

  it('diffs between refs and between worlds of a chain: objects and links, property by property, paginated', async () => {
    type Diff = {
      objects: { pk: string; change: string; side: string; properties: Record<string, unknown> }[];
      links: { fromPk: string; toPk: string; change: string; side: string }[];
      next: string | null;
      commonAncestor: unknown;
    };
    const diff = async (world: string, query: string, limit = 2) => {
      const all: Diff = { objects: [], links: [], next: null, commonAncestor: null };
      let cursor: string | null = null;
      do {
        const res = await call('GET', world, `diff?${query}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`);
        expect(res.statusCode, res.body).toBe(200);
        const page = res.json() as Diff;
        all.objects.push(...page.objects);
        all.links.push(...page.links);
        all.commonAncestor = page.commonAncestor;
        cursor = page.next;
      } while (cursor);
      return all;
    };
    const between = await diff('base', `from=${commits.created}&to=${commits.o5deleted}`);
    expect(between.objects).toEqual([
      {
        type: 'Order',
        pk: 'o1',
        change: 'modified',
        side: 'to',
        fromVersion: 1,
        toVersion: 3,
        properties: { amount: { old: 10, new: 12 }, status: { old: 'open', new: 'paid' } },
      },
      {
        type: 'Order',
        pk: 'o5',
        change: 'removed',
        side: 'to',
        fromVersion: 1,
        toVersion: null,
        properties: {
          id: { old: 'o5', new: null },
          amount: { old: 50, new: null },
          status: { old: 'open', new: null },
        },
      },
    ]);
    expect(between.links).toEqual([]);

    const against = await diff('child', 'against=base');
    expect(against.commonAncestor).toEqual({ world: 'base', commit: commits.child });
    expect(against.objects.map((o) => [o.pk, o.change, o.side, o.properties])).toEqual([
      ['o1', 'modified', 'to', { amount: { old: 12, new: 13 } }],
      ['o2', 'modified', 'both', { amount: { old: 22, new: 21 } }],
      ['o3', 'modified', 'from', { amount: { old: 31, new: 30 } }],
      ['o4', 'modified', 'to', { amount: { old: 40, new: 43 }, status: { old: 'open', new: null } }],
      [
        'o6',
        'added',
        'to',
        { id: { old: null, new: 'o6' }, amount: { old: null, new: 60 }, status: { old: null, new: 'open' } },
      ],
      [
        'o7',
        'removed',
        'from',
        { id: { old: 'o7', new: null }, amount: { old: 70, new: null }, status: { old: 'open', new: null } },
      ],
    ]);
    expect(against.links.map((l) => [l.fromPk, l.toPk, l.change, l.side])).toEqual([
      ['c1', 'o2', 'removed', 'to'],
      ['c1', 'o3', 'added', 'to'],
    ]);
    const customers = await diff('child', 'against=base&type=Customer', 10);
    expect([customers.objects.length, customers.links.length]).toEqual([0, 2]);
    // Between refs of a fork: its own writes since its fork point.
    const own = await diff('child', `from=${commits.child}`, 3);
    expect(own.objects.map((o) => o.pk)).toEqual(['o1', 'o2', 'o4', 'o6']);
    // A grandchild against its grandparent: what each side's chain changed since they diverged.
    const deep = await diff('great', 'against=child', 10);
    expect(deep.links.map((l) => [l.fromPk, l.toPk, l.change, l.side])).toEqual([
      ['c1', 'o1', 'removed', 'to'],
      ['c1', 'o3', 'removed', 'to'],
      ['c1', 'o4', 'added', 'to'],
    ]);
    expect(deep.commonAncestor).toEqual({ world: 'child', commit: commits.grand });
    expect(deep.objects.map((o) => [o.pk, o.change, o.side])).toEqual([
      ['o1', 'removed', 'to'],
      ['o4', 'modified', 'both'],
      ['o8', 'added', 'to'],
    ]);

    await s.world('island', { objectTypes: { Order } });
    const island = expectProblem(await call('GET', 'child', 'diff?against=island'), 422);
    expect(island.errors[0].path).toBe('querystring/against');
    expectProblem(await call('GET', 'child', 'diff?against=nowhere'), 422);
    expect(expectProblem(await call('GET', 'child', 'diff'), 400).errors[0].path).toBe('querystring/from');
    expectProblem(await call('GET', 'child', `diff?against=base&from=${commits.child}`), 400);
    const future = expectProblem(await call('GET', 'child', `diff?from=${(await head()) + 1000}`), 404);
    expect(future.errors[0].path).toBe('querystring/from');
    const first = await call('GET', 'child', 'diff?against=base&limit=1');
    const foreign = await call('GET', 'child', `diff?from=${commits.child}&cursor=${first.json().next}`);
    expect(expectProblem(foreign, 400).errors[0].path).toBe('querystring/cursor');
  });

  it('bulk ingest in a fork continues the inherited versions and leaves the base alone', async () => {
    const rows = [
      { properties: { id: 'o3', amount: 30, status: 'open' } }, // identical to the inherited o3: unchanged
      { properties: { id: 'o4', amount: 44 } }, // the child's own head, version 3 -> 4
      { properties: { id: 'o5', amount: 55 } }, // deleted in the base before the fork: version 3
      { properties: { id: 'o7', amount: 77 } }, // the base's after the fork: new in the child
    ];
    const res = await s.dataCall('POST', '/v1/worlds/child/bulk/Order', {
      body: `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`,
      headers: { 'content-type': 'application/x-ndjson' },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ created: 2, updated: 1, unchanged: 1 });
    expect(await listAll('child', 'sort=id', 10)).toEqual(['o1@4', 'o2@3', 'o3@1', 'o4@4', 'o5@3', 'o6@1', 'o7@1']);
    expect((await get('base', 'Order', 'o7')).json()).toMatchObject({ version: 1, properties: { amount: 70 } });
    expectProblem(await get('base', 'Order', 'o5'), 404);
  });

  it('documents ?at= and the diff in the OpenAPI document', async () => {
    const doc = (await s.data.app.inject({ method: 'GET', url: '/docs/json' })).json();
    const params = (path: string) =>
      (doc.paths[path].get.parameters as { name: string; in: string }[])
        .filter((p) => p.in === 'query')
        .map((p) => p.name);
    expect(params('/v1/worlds/{world}/objects/{type}/{pk}')).toContain('at');
    expect(params('/v1/worlds/{world}/objects/{type}')).toContain('at');
    expect(params('/v1/worlds/{world}/objects/{type}/{pk}/links/{linkType}')).toContain('at');
    expect(params('/v1/worlds/{world}/diff')).toEqual(
      expect.arrayContaining(['from', 'to', 'against', 'type', 'cursor']),
    );
    const body = doc.paths['/v1/worlds/{world}/diff'].get.responses['200'].content['application/json'].schema;
    expect(Object.keys(body.properties)).toEqual(
      expect.arrayContaining(['from', 'to', 'commonAncestor', 'objects', 'links', 'next']),
    );
  });

  it('concurrent writers on both sides during the fork: each write is on exactly one side of the fork point', async () => {
    for (let i = 0; i < 20; i++) await put('base', 'Order', `k${i}`, { amount: 0 });
    let stop = false;
    const writes: { pk: string; amount: number; commit: number }[] = [];
    const writer = async (pk: string) => {
      for (let amount = 1; !stop; amount++) {
        const res = await call('PUT', 'base', `objects/Order/${pk}`, { properties: { amount } });
        // A loaded machine can put the identity replica behind (503, retry): nothing was written.
        if (res.statusCode === 503) {
          amount--;
          continue;
        }
        expect(res.statusCode, res.body).toBe(200);
        writes.push({ pk, amount, commit: commitOf(res) });
      }
    };
    await ready('base');
    const running = Array.from({ length: 4 }, (_, i) =>
      writer(`k${i}`).finally(() => {
        stop = true;
      }),
    );
    await new Promise((r) => setTimeout(r, 100));
    const forkRes = s.controlCall('POST', '/v1/worlds', { body: { id: 'busy', from: { world: 'base' } } });
    const point = await s.until('busy provisioned in data', async () => {
      const { rows } = await s.data.app.pg.query<{ base_seq: string }>(`SELECT base_seq FROM worlds WHERE id = 'busy'`);
      return rows[0] ? Number(rows[0].base_seq) : undefined;
    });
    expect((await forkRes).statusCode).toBe(202);
    // The child writes too while the base keeps going.
    await s.until('busy schema', async () =>
      (await get('busy', 'Order', 'k10')).statusCode === 200 ? true : undefined,
    );
    for (let i = 10; i < 14; i++) await put('busy', 'Order', `k${i}`, { amount: -1 });
    await new Promise((r) => setTimeout(r, 100));
    stop = true;
    await Promise.all(running);
    for (let i = 0; i < 4; i++) {
      const before = writes.filter((w) => w.pk === `k${i}` && w.commit <= point).at(-1);
      const child = (await get('busy', 'Order', `k${i}`)).json();
      expect(child.properties.amount).toBe(before?.amount ?? 0);
      const last = writes.filter((w) => w.pk === `k${i}`).at(-1);
      expect((await get('base', 'Order', `k${i}`)).json().properties.amount).toBe(last?.amount);
    }
    for (let i = 10; i < 14; i++) expect((await get('base', 'Order', `k${i}`)).json().properties.amount).toBe(0);
    expect(writes.some((w) => w.commit > point)).toBe(true);
  });
});
