import { metricSample, primaryAsReplicaEnv, replicaTestEnv, testReplica } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';

/**
 * Read replicas with read-your-writes (issue 33, docs/adr/0080), on a real streaming replica of the
 * test PostgreSQL (`./onto test` starts it: ONTO_TEST_PG_REPLICA_URL). Its replay is paused to
 * make it fall behind: a read with a write's token still sees the write (from the primary), a
 * read without one is served by the replica until it lags past REPLICA_MAX_LAG_MS.
 */

// Long enough for the steps a test takes while the replica is paused, on a loaded 2-core machine.
const MAX_LAG_MS = 10_000;
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};

describe('read replicas', () => {
  let s: Stack;
  let replica: Awaited<ReturnType<typeof testReplica>>;
  const metrics = async () => (await s.data.app.inject({ method: 'GET', url: '/metrics' })).body;

  beforeAll(async () => {
    s = await dataStack({
      dataEnv: replicaTestEnv(MAX_LAG_MS),
    });
    replica = await testReplica();
    await s.identityKnown();
    await s.world('rr', { objectTypes: { Order } });
  }, 120_000);
  afterAll(async () => {
    await replica?.end();
    await s?.close();
  });

  it('refuses a URL that is not a replica, naming it', async () => {
    const { buildTestService } = await import('@onto/shared/testing');
    const data = await import('../src/app.js');
    const { ConfigSchema } = await import('../src/config.js');
    await expect(
      buildTestService(
        { schema: ConfigSchema, app: data.default, migrations: data.migrations } as never,
        primaryAsReplicaEnv(),
      ),
    ).rejects.toThrow(/DATABASE_REPLICA_URLS: 127\.0\.0\.1:5432\/onto_t_\w+ is not a replica/);
  });

  it('serves a read with a write’s token from what has the write, one without from the replica', async () => {
    // Caught up first: the replica has the world.
    await s.until('the replica has the world', async () => {
      const res = await s.dataCall('PUT', '/v1/worlds/rr/objects/Order/o-0', { body: { properties: { id: 'o-0' } } });
      const token = res.headers['x-consistency-token'] as string;
      const read = await s.dataCall('GET', '/v1/worlds/rr/objects/Order/o-0', {
        headers: { 'x-consistency-token': token },
      });
      return metricSample(await metrics(), 'onto_db_reads_total', 'target="replica"') > 0 && read.statusCode === 200
        ? true
        : undefined;
    });

    await replica.pause();
    try {
      const behind = metricSample(await metrics(), 'onto_db_reads_total', 'reason="replica behind the position"');
      const put = await s.dataCall('PUT', '/v1/worlds/rr/objects/Order/o-1', {
        body: { properties: { id: 'o-1', amount: 7 } },
      });
      expect(put.statusCode, put.body).toBe(201);
      const token = put.headers['x-consistency-token'] as string;
      expect(token).toMatch(/^data=\d+, datalsn=\d+$/);

      // Without the token: the paused replica answers, and it has not seen o-1.
      const stale = await s.dataCall('GET', '/v1/worlds/rr/objects/Order/o-1');
      expect(stale.statusCode, stale.body).toBe(404);
      // With it: the replica cannot have it within REPLICA_WAIT_MS, so the primary serves it.
      const mine = await s.dataCall('GET', '/v1/worlds/rr/objects/Order/o-1', {
        headers: { 'x-consistency-token': token },
      });
      expect(mine.statusCode, mine.body).toBe(200);
      expect(mine.json().properties.amount).toBe(7);
      expect(metricSample(await metrics(), 'onto_db_reads_total', 'reason="replica behind the position"')).toBe(
        behind + 1,
      );

      // Lagging past REPLICA_MAX_LAG_MS (writes go on, replay does not), it is skipped: reads
      // without a token reach the primary, and /ready says why.
      await s.until(
        'the lagging replica skipped',
        async () => {
          await s.dataCall('PUT', '/v1/worlds/rr/objects/Order/o-2', { body: { properties: { id: 'o-2' } } });
          const res = await s.dataCall('GET', '/v1/worlds/rr/objects/Order/o-1');
          return res.statusCode === 200 ? true : undefined;
        },
        MAX_LAG_MS + 10_000,
      );
      const ready = await s.data.app.inject({ method: 'GET', url: '/ready' });
      const check = ready.json().checks['postgres-replicas'];
      expect(ready.json().status).toBe('degraded');
      expect(check.status).toBe('down');
      expect(check.error).toMatch(/lags \d+ ms/);
      expect(check.error).toMatch(/127\.0\.0\.1:1\/none/);
      expect(metricSample(await metrics(), 'onto_db_replica_usable', 'replica="127.0.0.1:1/none"')).toBe(0);
    } finally {
      await replica.resume();
    }

    // Caught up again, it serves reads without a token again.
    await s.until(
      'the replica back in use',
      async () => {
        const before = metricSample(await metrics(), 'onto_db_reads_total', 'reason="no position"');
        const res = await s.dataCall('GET', '/v1/worlds/rr/objects/Order/o-1');
        const after = metricSample(await metrics(), 'onto_db_reads_total', 'reason="no position"');
        return res.statusCode === 200 && after === before + 1 ? true : undefined;
      },
      20_000,
    );
  }, 90_000);

  it('serves lists, queries and aggregations without a token at the newest cut the replica has (docs/adr/0083)', async () => {
    const count = (res: { json(): { groups: { metrics: { n: number } }[] } }) => res.json().groups[0]?.metrics.n ?? 0;
    const pks = (objects: { pk: string }[]) => objects.map((o) => o.pk);
    const before = await s.dataCall('PUT', '/v1/worlds/rr/objects/Order/c-0', { body: { properties: { id: 'c-0' } } });
    expect(before.statusCode, before.body).toBe(201);
    // Caught up: a list without a token, served by the replica at its cut, has c-0.
    await s.until('the replica has a cut with c-0', async () => {
      const list = await s.dataCall('GET', '/v1/worlds/rr/objects/Order?limit=1000');
      return pks(list.json().objects).includes('c-0') ? true : undefined;
    });
    await replica.pause();
    try {
      const put = await s.dataCall('PUT', '/v1/worlds/rr/objects/Order/c-1', { body: { properties: { id: 'c-1' } } });
      expect(put.statusCode, put.body).toBe(201);
      const token = put.headers['x-consistency-token'] as string;
      const commit = Number(/data=(\d+)/.exec(token)?.[1]);
      const primaryReads = async () =>
        (await metrics())
          .split('\n')
          .filter((l) => l.startsWith('onto_db_reads_total{') && l.includes('target="primary"'))
          .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
      const onPrimary = await primaryReads();

      const allReads = async () =>
        (await metrics())
          .split('\n')
          .filter((l) => l.startsWith('onto_db_reads_total{'))
          .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
      const readsBefore = await allReads();

      // Without a token: the paused replica answers at its cut, which is before c-1.
      const list = await s.dataCall('GET', '/v1/worlds/rr/objects/Order?limit=1000');
      expect(list.statusCode, list.body).toBe(200);
      expect(await allReads(), 'one read counted for one request').toBe(readsBefore + 1);
      expect(list.json().commit).toBeLessThan(commit);
      expect(pks(list.json().objects)).toContain('c-0');
      expect(pks(list.json().objects)).not.toContain('c-1');
      const query = await s.dataCall('POST', '/v1/worlds/rr/objects/Order/query', { body: { pageSize: 1000 } });
      expect(query.statusCode, query.body).toBe(200);
      expect(query.json().commit).toBe(list.json().commit);
      expect(pks(query.json().objects)).toEqual(expect.arrayContaining(pks(list.json().objects)));
      expect(query.json().objects).toHaveLength(list.json().objects.length);
      const agg = (headers: Record<string, string> = {}) =>
        s.dataCall('POST', '/v1/worlds/rr/objects/Order/aggregate', {
          body: { metrics: [{ name: 'n', op: 'count' }] },
          headers,
        });
      const counted = await agg();
      expect(counted.statusCode, counted.body).toBe(200);
      expect(count(counted)).toBe(list.json().objects.length);
      // A cursor of that cut reads on at it there.
      const first = await s.dataCall('GET', '/v1/worlds/rr/objects/Order?limit=1');
      const next = await s.dataCall(
        'GET',
        `/v1/worlds/rr/objects/Order?limit=1&cursor=${encodeURIComponent(first.json().next)}`,
      );
      expect(next.statusCode, next.body).toBe(200);
      expect(next.json().commit).toBe(first.json().commit);
      expect(next.json().commit).toBeLessThan(commit);
      // None of these was served by the primary (nor waited for the replica to replay its position).
      expect(await primaryReads()).toBe(onPrimary);

      // With the write's token: the primary's cut, with c-1 (the replica cannot have it: the primary serves).
      const mine = await s.dataCall('GET', '/v1/worlds/rr/objects/Order?limit=1000', {
        headers: { 'x-consistency-token': token },
      });
      expect(mine.statusCode, mine.body).toBe(200);
      expect(mine.json().commit).toBeGreaterThanOrEqual(commit);
      expect(pks(mine.json().objects)).toContain('c-1');
      expect(count(await agg({ 'x-consistency-token': token }))).toBe(mine.json().objects.length);

      // A world the paused replica has not seen: the list falls back to the primary, and the
      // request still counts as one read (the replica it tried first is not counted).
      await s.world('rr-new', { objectTypes: { Order } });
      const fresh = await allReads();
      const unseen = await s.dataCall('GET', '/v1/worlds/rr-new/objects/Order?limit=10');
      expect(unseen.statusCode, unseen.body).toBe(200);
      expect(await allReads(), 'one read counted for one request').toBe(fresh + 1);
    } finally {
      await replica.resume();
    }
  }, 60_000);
});
