import { metricSample, primaryAsReplicaEnv, replicaTestEnv, testReplica } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack, Order } from './stack.js';

/**
 * Read replicas of intelligence (issue 33, docs/adr/0080), on a real streaming replica of the test
 * PostgreSQL (ONTO_TEST_PG_REPLICA_URL). A token naming a data write is waited for on the primary;
 * the read then needs a replica that has replayed the primary's position of that moment. With the
 * replica's replay paused, such a read still sees the write (from the primary), a read without a
 * token is served by the replica (stale, and its token says so) until it lags past
 * REPLICA_MAX_LAG_MS.
 */

// Long enough for the steps below while the replica is paused, on a loaded 2-core machine.
const MAX_LAG_MS = 10_000;

const seqOf = (token: string) => Number(/(?:^|[,;]\s*)data=(\d+)/.exec(token)?.[1]);

describe('intelligence read replicas', () => {
  let s: IntelligenceStack;
  let replica: Awaited<ReturnType<typeof testReplica>>;
  const metrics = async () => {
    if (!s.intelligence) throw new Error('no intelligence');
    return (await s.intelligence.app.inject({ method: 'GET', url: '/metrics' })).body;
  };
  const reads = async (labels: string) => metricSample(await metrics(), 'onto_db_reads_total', labels);
  const put = async (pk: string, amount: number) => {
    const res = await s.dataCall('PUT', `/v1/worlds/rri/objects/Order/${pk}`, {
      body: { properties: { id: pk, amount } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return res.headers['x-consistency-token'] as string;
  };

  beforeAll(async () => {
    s = await intelligenceStack({
      intelligenceEnv: replicaTestEnv(MAX_LAG_MS),
    });
    replica = await testReplica();
    await s.world('rri', { objectTypes: { Order } });
  }, 120_000);
  afterAll(async () => {
    await replica?.end();
    await s?.close();
  });

  it('refuses a URL that is not a replica, naming it', async () => {
    const { buildTestService } = await import('@onto/shared/testing');
    const intelligence = await import('../src/app.js');
    const { ConfigSchema } = await import('../src/config.js');
    await expect(
      buildTestService(
        { schema: ConfigSchema, app: intelligence.default, migrations: intelligence.migrations } as never,
        primaryAsReplicaEnv(),
      ),
    ).rejects.toThrow(/DATABASE_REPLICA_URLS: 127\.0\.0\.1:5432\/onto_t_\w+ is not a replica/);
  });

  it('never answers a token with less than it names; serves a read without one from the replica', async () => {
    // Caught up first: the replica has the world and reads go there.
    const first = await put('o-0', 1);
    await s.until('the replica serves reads', async () => {
      const res = await s.intelCall('GET', '/v1/worlds/rri/objects/Order/o-0', {
        headers: { 'x-consistency-token': first },
      });
      return res.statusCode === 200 && (await reads('target="replica"')) > 0 ? true : undefined;
    });
    await s.until('the replica has o-0', async () => {
      const res = await s.intelCall('GET', '/v1/worlds/rri/objects/Order/o-0');
      return res.statusCode === 200 ? true : undefined;
    });

    await replica.pause();
    try {
      const behind = await reads('reason="replica behind the position"');
      const token = await put('o-1', 7);
      expect(token).toMatch(/^data=\d+$/);

      // With data's token: applied on the primary (waited for), which the paused replica has not
      // replayed within REPLICA_WAIT_MS: the primary serves it.
      const mine = await s.intelCall('GET', '/v1/worlds/rri/objects/Order/o-1', {
        headers: { 'x-consistency-token': token },
      });
      expect(mine.statusCode, mine.body).toBe(200);
      expect(mine.json().properties.amount).toBe(7);
      expect(seqOf(mine.headers['x-consistency-token'] as string)).toBeGreaterThanOrEqual(seqOf(token));
      expect(await reads('reason="replica behind the position"')).toBe(behind + 1);

      // Without it: the paused replica answers, without o-1, and its token names what it has,
      // not the primary's watermark.
      const fromReplica = await reads('reason="no position"');
      const stale = await s.intelCall('GET', '/v1/worlds/rri/objects/Order/o-1');
      expect(stale.statusCode, stale.body).toBe(404);
      expect(await reads('reason="no position"')).toBe(fromReplica + 1);
      const list = await s.intelCall('GET', '/v1/worlds/rri/derived-properties');
      expect(seqOf(list.headers['x-consistency-token'] as string)).toBeLessThan(seqOf(token));

      // intelligence's own write answers its WAL position; the read with its token sees the write.
      const defined = await s.intelCall('PUT', '/v1/worlds/rri/derived-properties/doubled', {
        body: { objectType: 'Order', expression: 'self.amount * 2' },
      });
      expect(defined.statusCode, defined.body).toBe(201);
      const own = defined.headers['x-consistency-token'] as string;
      expect(own).toMatch(/^data=\d+, intelligencelsn=\d+$/);
      const seen = await s.intelCall('GET', '/v1/worlds/rri/derived-properties/doubled', {
        headers: { 'x-consistency-token': own },
      });
      expect(seen.statusCode, seen.body).toBe(200);
      expect(
        (await s.intelCall('GET', '/v1/worlds/rri/derived-properties/doubled')).statusCode,
        'the paused replica has not replayed the definition',
      ).toBe(404);

      // An aggregate cuts its commit on the primary: the replica that has not replayed it is not used.
      const sum = await s.intelCall('POST', '/v1/worlds/rri/objects/Order/aggregate', {
        headers: { 'x-consistency-token': token },
        body: { metrics: [{ name: 'total', op: 'sum', property: 'amount' }], allowScan: true },
      });
      expect(sum.statusCode, sum.body).toBe(200);
      expect(sum.json().groups[0].metrics.total).toBe(8);

      // Lagging past REPLICA_MAX_LAG_MS (writes go on, replay does not), it is skipped: reads
      // without a token reach the primary, and /ready says why.
      await s.until(
        'the lagging replica skipped',
        async () => {
          await put('o-2', 2);
          const res = await s.intelCall('GET', '/v1/worlds/rri/objects/Order/o-1');
          return res.statusCode === 200 ? true : undefined;
        },
        MAX_LAG_MS + 10_000,
      );
      if (!s.intelligence) throw new Error('no intelligence');
      const ready = await s.intelligence.app.inject({ method: 'GET', url: '/ready' });
      const check = ready.json().checks['postgres-replicas'];
      expect(ready.json().status).toBe('degraded');
      expect(check.status).toBe('down');
      expect(check.error).toMatch(/lags \d+ ms/);
      expect(check.error).toMatch(/127\.0\.0\.1:1\/none/);
    } finally {
      await replica.resume();
    }

    // Caught up again, it serves reads without a token again.
    await s.until(
      'the replica back in use',
      async () => {
        const before = await reads('reason="no position"');
        const res = await s.intelCall('GET', '/v1/worlds/rri/objects/Order/o-2');
        return res.statusCode === 200 && (await reads('reason="no position"')) === before + 1 ? true : undefined;
      },
      20_000,
    );
  }, 90_000);
});
