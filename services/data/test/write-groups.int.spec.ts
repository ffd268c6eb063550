import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';

const Counter = {
  displayName: 'Counter',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    n: { type: 'integer', required: true },
    label: { type: 'string' },
  },
};
const W = 'groups';
const url = (pk: string) => `/v1/worlds/${W}/objects/Counter/${encodeURIComponent(pk)}`;

/** Group commit of single-object writes (objects/change.ts): one transaction at a time, so that writes queue. */
describe('single-object writes committed in groups', () => {
  let s: Stack;
  let editor: string;
  const groups = () => s.data.app.objectWrites;

  /** The change events of one object, in seq order, as stored in the outbox. */
  const events = async (pk: string) =>
    (
      await s.data.app.pg.query<{ body: string }>('SELECT body FROM outbox WHERE partition_key = $1 ORDER BY id', [
        `${W}/Counter/${encodeURIComponent(pk)}`,
      ])
    ).rows.map(
      (r) =>
        JSON.parse(r.body) as { type: string; version: number; producer_seq: number; payload: Record<string, unknown> },
    );

  const history = async (pk: string) =>
    (
      await s.data.app.pg.query<{ version: number; seq: string }>(
        'SELECT version, seq FROM object_versions WHERE world_id = $1 AND pk = $2 ORDER BY seq',
        [W, pk],
      )
    ).rows.map((r) => ({ version: r.version, seq: Number(r.seq) }));

  const put = (pk: string, properties: Record<string, unknown>, headers: Record<string, string> = {}) =>
    s.dataCall('PUT', url(pk), { token: editor, body: { properties }, headers });

  beforeAll(async () => {
    s = await dataStack({ dataEnv: { WRITE_GROUPS_IN_FLIGHT: '1', WRITE_GROUP_MAX: '64' } });
    await s.world(W, { objectTypes: { Counter } });
    editor = await s.user('ed', W, 'editor');
  });
  afterAll(async () => {
    await s?.close();
  });

  it('decides each write alone inside its group: refusals refuse one write, the others commit with their own versions and events', async () => {
    expect((await put('e-1', { n: 1 })).statusCode).toBe(201);
    expect((await put('e-2', { n: 1 })).statusCode).toBe(201);
    expect((await put('e-3', { n: 0 })).statusCode).toBe(201);
    const before = { ...groups().stats };

    const creates = Array.from({ length: 40 }, (_, i) => put(`g-${i}`, { n: i }));
    const stale = put('e-1', { n: 2 }, { 'if-match': '"7"' });
    const invalid = put('g-bad', { n: 'x' });
    const missing = s.dataCall('PATCH', url('nobody'), { token: editor, body: { properties: { n: 1 } } });
    const unchanged = put('e-2', { n: 1 });
    // Five patches of one object: one per group, each on top of the one before.
    const patches = [1, 2, 3, 4, 5].map((n) =>
      s.dataCall('PATCH', url('e-3'), { token: editor, body: { properties: { label: `p${n}` } } }),
    );
    const created = await Promise.all(creates);
    const [staleR, invalidR, missingR, unchangedR] = await Promise.all([stale, invalid, missing, unchanged]);
    const patched = await Promise.all(patches);

    const stats = groups().stats;
    expect(stats.groups - before.groups, 'writes were committed in groups').toBeGreaterThan(0);
    expect(stats.grouped - before.grouped).toBeGreaterThan(stats.groups - before.groups);
    expect(stats.fellBack - before.fellBack).toBe(0);
    const metrics = (await s.dataCall('GET', '/metrics')).body;
    expect(metrics).toContain(`onto_data_write_groups_total{service="data"} ${stats.groups}`);
    expect(metrics).toContain(`onto_data_grouped_writes_total{service="data"} ${stats.grouped}`);

    for (const [i, r] of created.entries()) {
      expect(r.statusCode, r.body).toBe(201);
      expect(r.json()).toMatchObject({ pk: `g-${i}`, version: 1, properties: { id: `g-${i}`, n: i } });
      const token = Number(String(r.headers['x-consistency-token']).replace('data=', ''));
      // One history row and one event per write, carrying the seq the answer names.
      expect(await history(`g-${i}`)).toEqual([{ version: 1, seq: token }]);
      const [event, ...more] = await events(`g-${i}`);
      expect(more).toEqual([]);
      expect(event).toMatchObject({
        type: 'object.created',
        version: 1,
        producer_seq: token,
        payload: { pk: `g-${i}`, version: 1, before: null, after: { id: `g-${i}`, n: i } },
      });
    }
    expect(staleR.statusCode).toBe(412);
    expect(staleR.json()).toMatchObject({ currentVersion: 1 });
    expect(invalidR.statusCode).toBe(422);
    expect(missingR.statusCode).toBe(404);
    expect(unchangedR.statusCode).toBe(200);
    expect(unchangedR.json().version).toBe(1);
    expect((await events('e-1')).length).toBe(1);
    expect((await events('e-2')).length).toBe(1);
    expect((await s.dataCall('GET', url('g-bad'))).statusCode).toBe(404);

    expect(patched.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect(patched.map((r) => r.json().version).sort()).toEqual([2, 3, 4, 5, 6]);
    const e3 = await events('e-3');
    expect(e3.map((e) => e.version)).toEqual([1, 2, 3, 4, 5, 6]);
    // Each event's before is the previous event's after: no write was decided on a stale head.
    for (let i = 1; i < e3.length; i++) expect(e3[i]?.payload.before).toEqual(e3[i - 1]?.payload.after);
    expect((await history('e-3')).map((h) => h.version)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('runs every write of a group that failed as a whole again alone: nothing lost, nothing twice', async () => {
    expect((await put('a', { n: 1 })).statusCode).toBe(201);
    const client = (): Promise<pg.Client> => {
      const c = new pg.Client({ connectionString: s.data.databaseUrl });
      return c.connect().then(() => c);
    };
    const holder = await client();
    const creator = await client();
    try {
      // The only transaction slot is taken by a write of `a` that waits for this row lock…
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM object_heads WHERE world_id = $1 AND pk = 'a' FOR UPDATE`, [W]);
      const blocked = put('a', { n: 2 });
      await s.until('the write of a to start', async () => (groups().stats.alone > 0 ? true : undefined));
      // …so these three queue and will be committed as one group.
      const queued = ['b', 'c', 'k'].map((pk) => put(pk, { n: 1 }));
      await s.until('three queued writes', async () => (groups().queued === 3 ? true : undefined));
      // k is being created by another transaction, not yet committed: the group sees no k, plans
      // to create it, and its INSERT then waits for that transaction.
      await creator.query('BEGIN');
      await creator.query(
        `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor)
         SELECT $1, 'Counter', 'k', 1, nextval('data_seq'), false, '{"id":"k","n":0}',
                (SELECT max(version) FROM schema_versions WHERE world_id = $1), 'test'`,
        [W],
      );
      const fellBack = groups().stats.fellBack;
      await holder.query('COMMIT');
      expect((await blocked).statusCode).toBe(200);
      await s.until('the group to wait on k', async () => {
        const { rows } = await s.data.app.pg.query(
          `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO object_heads%'`,
        );
        return rows.length > 0 ? true : undefined;
      });
      await creator.query('COMMIT');
      const [b, c, k] = await Promise.all(queued);
      expect(groups().stats.fellBack).toBe(fellBack + 1);
      expect(b?.statusCode).toBe(201);
      expect(c?.statusCode).toBe(201);
      // k was created meanwhile: run alone, the write replaced it.
      expect(k?.statusCode, k?.body).toBe(200);
      expect(k?.json()).toMatchObject({ version: 2, properties: { id: 'k', n: 1 } });
      for (const pk of ['b', 'c']) {
        expect((await history(pk)).map((h) => h.version)).toEqual([1]);
        expect((await events(pk)).map((e) => e.version)).toEqual([1]);
      }
      expect((await events('k')).map((e) => [e.type, e.version])).toEqual([['object.updated', 2]]);
      expect((await events('a')).map((e) => e.version)).toEqual([1, 2]);
    } finally {
      await holder.end().catch(() => {});
      await creator.end().catch(() => {});
    }
  });
});
