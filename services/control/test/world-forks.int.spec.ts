import { type EventEnvelope, newEvent, type Producer, parseEvent, uuidv7 } from '@onto/shared';
import {
  blockedOnLock,
  committedToEnd,
  createTestTopics,
  eventually,
  outboxAudit,
  type TestService,
  testBroker,
  testEndpoints,
} from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlService, expectProblem } from './control-service.js';

/**
 * Forks as control sees them (issue 16, /work/wt/BRANCHES-CONTRACT.md): control alone on a topic
 * prefix of its own; data's and intelligence's replies are produced here by hand, so each reply,
 * and each failure, is exactly the one the test means.
 */

const order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};

interface World {
  id: string;
  status: string;
  from: { world: string; ref: string | null; commit: number | null; schemaVersion: number } | null;
  failure: { field: string | null; reason: string } | null;
}

describe('forking a world at a ref', () => {
  let service: TestService<unknown>;
  let topics: Awaited<ReturnType<typeof createTestTopics>>;
  let producer: Producer;
  let admin: string;
  const published: EventEnvelope[] = [];
  let stopReading: () => Promise<void>;

  const call = (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown) =>
    service.app.inject({ method, url, payload: payload as never, headers: { authorization: `Bearer ${admin}` } });
  const world = async (id: string): Promise<World> => (await call('GET', `/v1/worlds/${id}`)).json();
  const until = (id: string, status: string) => {
    let last: World | undefined;
    return eventually(
      () => `world ${id} to be ${status}, not ${last?.status}`,
      async () => {
        last = await world(id);
        return last.status === status ? last : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 50 },
    );
  };
  /** The event of this type control published for the world (on onto.worlds). */
  const publishedEvent = (type: string, worldId: string) =>
    eventually(
      `${type} of ${worldId} published`,
      () => published.find((e) => e.type === type && e.world_id === worldId),
      { timeoutMs: 20_000, intervalMs: 50 },
    );
  /** A reply from data (onto.storage) or intelligence (onto.intelligence), as they would send it. */
  const reply = async (type: string, worldId: string, payload: Record<string, unknown>) => {
    const fromData = !type.startsWith('intelligence.');
    const event = newEvent({
      type: type as 'world.provisioned',
      worldId,
      key: worldId,
      version: 0,
      producer: fromData ? 'data' : 'intelligence',
      producerSeq: 0,
      payload,
    });
    const topic = `${topics.prefix}${fromData ? 'onto.storage' : 'onto.intelligence'}`;
    await producer.send([{ topic, messages: [{ key: worldId, value: JSON.stringify(event) }] }]);
  };
  /** Both provisioners report the world provisioned, data with the base it was given. */
  const provision = async (id: string, base?: { world: string; commit: number }) => {
    await publishedEvent('world.created', id);
    await reply('world.provisioned', id, { service: 'data', ...(base ? { base } : {}) });
    await reply('intelligence.world.provisioned', id, { service: 'intelligence' });
    return until(id, 'READY');
  };
  const ids = async () =>
    (await service.app.pg.query<{ id: string }>('SELECT id FROM worlds ORDER BY id')).rows.map((r) => r.id);

  beforeAll(async () => {
    const { kafkaBrokers } = testEndpoints();
    topics = await createTestTopics(kafkaBrokers, 2);
    ({ service, admin } = await controlService({
      ONTO_TOPIC_PREFIX: topics.prefix,
      WORLD_PROVISION_TIMEOUT_MS: '120000',
    }));
    const broker = testBroker(kafkaBrokers);
    producer = await broker.producer();
    const reader = await broker.consumer({
      groupId: `${topics.prefix}reader`,
      topics: [`${topics.prefix}onto.worlds`],
    });
    await reader.run(async (batch) => {
      for (const m of batch.messages) published.push(parseEvent(m.value));
    });
    stopReading = () => reader.disconnect();

    expect((await call('POST', '/v1/worlds', { id: 'prod' })).statusCode).toBe(202);
    await provision('prod');
    expect((await call('PUT', '/v1/worlds/prod/object-types/Order', order)).statusCode).toBe(200);
  });
  afterAll(async () => {
    await stopReading?.();
    await producer?.disconnect();
    await service?.close();
    await topics?.drop();
  });

  it('forks at a data commit with the current schema, and shows the commit data reports', async () => {
    const created = await call('POST', '/v1/worlds', { id: 'at-commit', from: { world: 'prod', ref: '42' } });
    expect(created.statusCode, created.body).toBe(202);
    expect(created.json().from).toEqual({ world: 'prod', ref: '42', commit: null, schemaVersion: 1 });
    const event = await publishedEvent('world.created', 'at-commit');
    expect(event.payload).toEqual({
      from: { world: 'prod', schemaVersion: 1, ref: { commit: 42 } },
      createdBy: 'admin',
    });
    const ready = await provision('at-commit', { world: 'prod', commit: 42 });
    expect(ready.from).toEqual({ world: 'prod', ref: '42', commit: 42, schemaVersion: 1 });
    expect((await call('GET', '/v1/worlds/at-commit/schema')).json()).toMatchObject({
      version: 1,
      objectTypes: { Order: {} },
    });

    // No ref: now. data says which commit "now" was.
    expect((await call('POST', '/v1/worlds', { id: 'at-now', from: { world: 'prod' } })).statusCode).toBe(202);
    expect((await publishedEvent('world.created', 'at-now')).payload).toEqual({
      from: { world: 'prod', schemaVersion: 1 },
      createdBy: 'admin',
    });
    const now = await provision('at-now', { world: 'prod', commit: 7 });
    expect(now.from).toEqual({ world: 'prod', ref: null, commit: 7, schemaVersion: 1 });
  });

  it('forks at an instant with the schema of that instant, and at a tag’s data commit once data and intelligence replied', async () => {
    const v2 = await call('PUT', '/v1/worlds/prod/object-types/Customer', { ...order, displayName: 'Customer' });
    expect(v2.json().version).toBe(2);
    const history = (await call('GET', '/v1/worlds/prod/schema/history')).json().versions;
    const v1At = new Date(history.find((v: { version: number }) => v.version === 1).createdAt);
    // Between versions 1 and 2, written with an offset: still that instant.
    const between = new Date(v1At.getTime() + (new Date(history[0].createdAt).getTime() - v1At.getTime()) / 2);
    const withOffset = `${new Date(between.getTime() + 2 * 3600_000).toISOString().slice(0, 23)}+02:00`;
    const atInstant = await call('POST', '/v1/worlds', { id: 'at-instant', from: { world: 'prod', ref: withOffset } });
    expect(atInstant.statusCode, atInstant.body).toBe(202);
    expect(atInstant.json().from).toMatchObject({ ref: withOffset, schemaVersion: 1 });
    const sent = (await publishedEvent('world.created', 'at-instant')).payload as {
      from: { schemaVersion: number; ref: { instant: string } };
    };
    expect(sent.from.schemaVersion).toBe(1);
    expect(Object.keys(sent.from.ref)).toEqual(['instant']);
    expect(Date.parse(sent.from.ref.instant)).toBe(Date.parse(withOffset));
    expect(Object.keys((await call('GET', '/v1/worlds/at-instant/schema')).json().objectTypes)).toEqual(['Order']);

    // A tag asks data and intelligence for their positions (docs/adr/0029); until both replied it is PENDING.
    const tag = await call('PUT', '/v1/worlds/prod/tags/release-1', { ref: { control: 1 } });
    expect(tag.statusCode, tag.body).toBe(201);
    expect(tag.json()).toMatchObject({ status: 'PENDING', ref: { control: 1 } });
    const asked = await publishedEvent('world.tag.requested', 'prod');
    const { request } = asked.payload as { tag: string; request: string };
    expect(asked.payload).toEqual({ tag: 'release-1', request });
    const early = expectProblem(
      await call('POST', '/v1/worlds', { id: 'at-tag', from: { world: 'prod', ref: 'release-1' } }),
      409,
    );
    expect(early.errors).toEqual([
      { path: '/from/ref', message: "tag release-1 waits for data's and intelligence's positions" },
    ]);
    // A reply to another request (a tag of that name deleted since) counts for nothing; then the real ones.
    await reply('world.tag.positioned', 'prod', { service: 'data', tag: 'release-1', request: uuidv7(), commit: 99 });
    await reply('world.tag.positioned', 'prod', { service: 'data', tag: 'release-1', request, commit: 5 });
    await reply('intelligence.world.tag.positioned', 'prod', {
      service: 'intelligence',
      tag: 'release-1',
      request,
      dataSeq: 4,
      schemaVersion: 1,
    });
    const complete = await eventually(
      'tag release-1 COMPLETE',
      async () => {
        const res = (await call('GET', '/v1/worlds/prod/tags/release-1')).json();
        return res.status === 'COMPLETE' ? res : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 50 },
    );
    expect(complete.ref).toEqual({ control: 1, data: 5, intelligence: 4 });
    // Immutable: a replayed reply with another commit changes nothing, nor does the same PUT again.
    await reply('world.tag.positioned', 'prod', { service: 'data', tag: 'release-1', request, commit: 6 });
    const broker = testBroker(testEndpoints().kafkaBrokers);
    await committedToEnd(broker, `${topics.prefix}control-worlds`, `${topics.prefix}onto.storage`, {
      timeoutMs: 20_000,
    });
    expect((await call('PUT', '/v1/worlds/prod/tags/release-1', {})).json().ref).toEqual(complete.ref);

    const atTag = await call('POST', '/v1/worlds', { id: 'at-tag', from: { world: 'prod', ref: 'release-1' } });
    expect(atTag.statusCode, atTag.body).toBe(202);
    expect(atTag.json().from).toMatchObject({ ref: 'release-1', schemaVersion: 1 });
    expect((await publishedEvent('world.created', 'at-tag')).payload).toEqual({
      from: { world: 'prod', schemaVersion: 1, ref: { commit: 5 } },
      createdBy: 'admin',
    });
    await provision('at-instant', { world: 'prod', commit: 3 });
    await provision('at-tag', { world: 'prod', commit: 5 });
  });

  it('refuses each bad fork with problem+json naming the field, and stores nothing', async () => {
    expect((await call('POST', '/v1/worlds', { id: 'pending' })).statusCode).toBe(202); // never provisioned
    await publishedEvent('world.created', 'pending');
    const before = await ids();
    const schemaRows = (await service.app.pg.query('SELECT count(*)::int AS n FROM schema_versions')).rows[0].n;
    const inAnHour = new Date(Date.now() + 3600_000).toISOString();
    const cases: [string, unknown, number, string, string][] = [
      ['unknown base', { world: 'ghost' }, 404, '/from/world', 'ghost'],
      ['base not READY', { world: 'pending' }, 409, '/from/world', 'PROVISIONING'],
      ['no such day', { world: 'prod', ref: '2026-02-30T10:00:00Z' }, 400, '/from/ref', 'RFC 3339'],
      ['no offset', { world: 'prod', ref: '2026-12-01T10:00:00' }, 400, '/from/ref', 'RFC 3339'],
      ['no such hour', { world: 'prod', ref: '2026-12-01T24:00:00Z' }, 400, '/from/ref', 'RFC 3339'],
      ['not a ref', { world: 'prod', ref: 'one week ago' }, 400, '/from/ref', 'neither'],
      ['commit too long', { world: 'prod', ref: '1234567890123456' }, 400, '/from/ref', 'not a commit'],
      ['instant in the future', { world: 'prod', ref: inAnHour }, 422, '/from/ref', 'future'],
      ['before the base', { world: 'prod', ref: '2001-01-01T00:00:00Z' }, 422, '/from/ref', 'did not exist'],
      ['unknown tag', { world: 'prod', ref: 'no-such-tag' }, 404, '/from/ref', 'no-such-tag'],
    ];
    for (const [what, from, status, path, detail] of cases) {
      const problem = expectProblem(await call('POST', '/v1/worlds', { id: 'refused', from }), status);
      expect(problem.errors?.[0]?.path, what).toBe(path);
      expect(problem.detail, what).toContain(detail);
    }
    // A cycle: prod would fork from its own fork.
    const cycle = expectProblem(await call('POST', '/v1/worlds', { id: 'prod', from: { world: 'at-commit' } }), 422);
    expect(cycle.errors).toEqual([{ path: '/from/world', message: 'at-commit descends from prod' }]);
    // Tags a ref could not tell from a commit or an instant.
    for (const name of ['123', '2026-01-01T10']) {
      expectProblem(await call('PUT', `/v1/worlds/prod/tags/${name}`, {}), 400);
    }

    expect(await ids()).toEqual(before);
    expect((await service.app.pg.query('SELECT count(*)::int AS n FROM schema_versions')).rows[0].n).toBe(schemaRows);
    const { rows: traces } = await service.app.pg.query(`SELECT 'role' FROM world_roles WHERE world_id = 'refused'`);
    expect(traces).toEqual([]);
    expect((await outboxAudit(service.app.pg)).filter((a) => a.world === 'refused')).toEqual([]);
  });

  it("FAILs a fork at once when data cannot resolve its ref, and asks for the world's drop", async () => {
    const created = await call('POST', '/v1/worlds', { id: 'too-far', from: { world: 'prod', ref: '999999' } });
    expect(created.statusCode, created.body).toBe(202);
    await publishedEvent('world.created', 'too-far');
    await reply('intelligence.world.provisioned', 'too-far', { service: 'intelligence' });
    await eventually('intelligence confirmed', async () =>
      (await world('too-far')).status === 'PROVISIONING' &&
      (await service.app.pg.query(`SELECT 1 FROM worlds WHERE id = 'too-far' AND 'intelligence' = ANY(confirmed_by)`))
        .rowCount === 1
        ? true
        : undefined,
    );
    const reason = 'commit 999999 is in the future: the head is 12';
    await reply('world.provision.failed', 'too-far', { service: 'data', field: '/from/ref', reason });
    const failed = await until('too-far', 'FAILED'); // long before the 120 s deadline
    expect(failed.failure).toEqual({ field: '/from/ref', reason });
    expect(failed.from).toEqual({ world: 'prod', ref: '999999', commit: null, schemaVersion: 2 });
    const drop = await publishedEvent('world.drop.requested', 'too-far');
    expect(drop.payload).toEqual({ reason, provisioned: ['intelligence'] });

    // A late report changes nothing but the record of who answered.
    await reply('world.provision.failed', 'too-far', { service: 'data', field: '/x', reason: 'again' });
    await reply('world.provisioned', 'too-far', { service: 'data' });
    await eventually('data recorded as having answered', async () =>
      (await service.app.pg.query(`SELECT 1 FROM worlds WHERE id = 'too-far' AND 'data' = ANY(confirmed_by)`))
        .rowCount === 1
        ? true
        : undefined,
    );
    expect(await world('too-far')).toMatchObject({ status: 'FAILED', failure: { field: '/from/ref', reason } });
    expect(published.filter((e) => e.type === 'world.drop.requested' && e.world_id === 'too-far')).toHaveLength(1);
  });

  it('refuses to delete a world that another forks from, naming them all', async () => {
    expect((await call('POST', '/v1/worlds', { id: 'base' })).statusCode).toBe(202);
    await provision('base');
    for (const id of ['child-b', 'child-a']) {
      expect((await call('POST', '/v1/worlds', { id, from: { world: 'base' } })).statusCode).toBe(202);
      await provision(id, { world: 'base', commit: 1 });
    }
    expect((await call('POST', '/v1/worlds', { id: 'grandchild', from: { world: 'child-a' } })).statusCode).toBe(202);
    await provision('grandchild', { world: 'child-a', commit: 1 });

    const refused = expectProblem(await call('DELETE', '/v1/worlds/base'), 409);
    expect(refused.children).toEqual(['child-a', 'child-b']);
    expect(refused.detail).toContain('child-a, child-b');
    expect((await world('base')).status).toBe('READY');
    expect(expectProblem(await call('DELETE', '/v1/worlds/child-a'), 409).children).toEqual(['grandchild']);

    // Once its children are gone (DELETED), the base may go.
    for (const id of ['grandchild', 'child-a', 'child-b']) {
      expect((await call('DELETE', `/v1/worlds/${id}`)).statusCode).toBe(202);
      await publishedEvent('world.deleted', id);
      await reply('world.dropped', id, { service: 'data' });
      await reply('intelligence.world.dropped', id, { service: 'intelligence' });
      await eventually(`${id} DELETED`, async () =>
        (await service.app.pg.query(`SELECT 1 FROM worlds WHERE id = $1 AND status = 'DELETED'`, [id])).rowCount === 1
          ? true
          : undefined,
      );
    }
    expect((await call('DELETE', '/v1/worlds/base')).statusCode).toBe(202);
  });

  it('counts a fork that commits while the delete of its base waits for it', async () => {
    expect((await call('POST', '/v1/worlds', { id: 'racing-base' })).statusCode).toBe(202);
    await provision('racing-base');
    // Another session creating the same id holds the fork back after its checks (base locked FOR SHARE).
    const holder = await service.app.pg.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(
        `INSERT INTO worlds (id, status, created_by) VALUES ('racing-child', 'PROVISIONING', 'someone')`,
      );
      const fork = call('POST', '/v1/worlds', { id: 'racing-child', from: { world: 'racing-base' } });
      await blockedOnLock(service.app.pg, '%INSERT INTO worlds%ON CONFLICT%');
      const deletion = call('DELETE', '/v1/worlds/racing-base');
      await blockedOnLock(service.app.pg, '%UPDATE%'); // its lock of the base, or its UPDATE of it
      await holder.query('ROLLBACK');
      expect((await fork).statusCode).toBe(202);
      expect(expectProblem(await deletion, 409).children).toEqual(['racing-child']);
    } finally {
      holder.release();
    }
    expect((await world('racing-base')).status).toBe('READY');
  });
});
