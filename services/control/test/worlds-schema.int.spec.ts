import { type IncomingMessage, parseEvent } from '@onto/shared';
import {
  buildTestService,
  committedToEnd,
  createTestTopics,
  eventually,
  outboxAudit,
  type TestService,
  testBroker,
  testEndpoints,
} from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as data from '../../data/src/app.js';
import { ConfigSchema as DataConfig } from '../../data/src/config.js';
import * as intelligence from '../../intelligence/src/app.js';
import { ConfigSchema as IntelligenceConfig } from '../../intelligence/src/config.js';
import { controlService, expectProblem } from './control-service.js';

type Service = TestService<unknown>;

/** control, and the provisioners asked for, on one topic prefix of their own. */
async function stack(provisioners: ('data' | 'intelligence')[], timeoutMs = 30_000) {
  const { kafkaBrokers } = testEndpoints();
  const topics = await createTestTopics(kafkaBrokers, 2);
  const env = { ONTO_TOPIC_PREFIX: topics.prefix };
  const { service: c, admin } = await controlService({ ...env, WORLD_PROVISION_TIMEOUT_MS: String(timeoutMs) });
  const others: Record<string, Service> = {};
  if (provisioners.includes('data')) {
    others.data = (await buildTestService(
      { schema: DataConfig, app: data.default, migrations: data.migrations } as never,
      env,
    )) as Service;
  }
  if (provisioners.includes('intelligence')) {
    others.intelligence = (await buildTestService(
      { schema: IntelligenceConfig, app: intelligence.default, migrations: intelligence.migrations } as never,
      env,
    )) as Service;
  }
  const call = (
    method: 'GET' | 'POST' | 'PUT' | 'DELETE',
    url: string,
    token = admin,
    payload?: unknown,
    headers = {},
  ) =>
    c.app.inject({ method, url, payload: payload as never, headers: { authorization: `Bearer ${token}`, ...headers } });
  return {
    control: c,
    others,
    prefix: topics.prefix,
    admin,
    call,
    until(world: string, status: string, timeoutMs = 20_000) {
      let last: {
        status?: string;
        confirmedBy?: string[];
        failure?: { field: string | null; reason: string } | null;
        from?: { world: string; ref: string | null; commit: number | null; schemaVersion: number } | null;
      } = {};
      return eventually(
        () => `world ${world} to be ${status}, not ${last.status}`,
        async () => {
          last = (await call('GET', `/v1/worlds/${world}`)).json();
          return last.status === status ? last : undefined;
        },
        { timeoutMs, intervalMs: 100 },
      );
    },
    async close() {
      await Promise.all([c, ...Object.values(others)].map((s) => s.close()));
      await topics.drop();
    },
  };
}

/** An access token for the user as they are now: roles travel in the token. */
async function accessTokenFor(s: Awaited<ReturnType<typeof stack>>, id: string): Promise<string> {
  const apiToken = (await s.call('POST', `/v1/users/${id}/tokens`, s.admin, {})).json().token;
  const res = await s.control.app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken } });
  return res.json().accessToken;
}

const order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer', indexed: true } },
};

describe('worlds and their schema', () => {
  let s: Awaited<ReturnType<typeof stack>>;

  beforeAll(async () => {
    s = await stack(['data', 'intelligence']);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('provisions a world in data and intelligence, then it is READY', async () => {
    const created = await s.call('POST', '/v1/worlds', s.admin, { id: 'prod' });
    expect(created.statusCode, created.body).toBe(202);
    expect(created.json()).toMatchObject({ id: 'prod', status: 'PROVISIONING', from: null });
    const ready = await s.until('prod', 'READY');
    expect(ready.confirmedBy).toEqual(['data', 'intelligence']);
    for (const svc of ['data', 'intelligence']) {
      const { rows } = await (s.others[svc] as Service).app.pg.query('SELECT id FROM worlds');
      expect(rows, svc).toEqual([{ id: 'prod' }]);
    }
    expectProblem(await s.call('POST', '/v1/worlds', s.admin, { id: 'prod' }), 409);
    expectProblem(await s.call('GET', '/v1/worlds/nowhere'), 404);
    const list = await s.call('GET', '/v1/worlds');
    expect(list.json().worlds.map((w: { id: string }) => w.id)).toContain('prod');
    // Both reports consumed and committed: control's consumer has nothing left on onto.storage.
    const metrics = (await s.control.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toContain(
      `onto_consumer_lag{consumer="${s.prefix}control-worlds",topic="${s.prefix}onto.storage",service="control"} 0`,
    );
  });

  it('versions the schema, conditional on If-Match, and publishes schema.updated keyed by world', async () => {
    await s.until('prod', 'READY');
    const first = await s.call('PUT', '/v1/worlds/prod/object-types/Order', s.admin, order, { 'if-match': '"0"' });
    expect(first.statusCode, first.body).toBe(200);
    expect(first.json()).toMatchObject({ version: 1, changed: true, breaking: false });
    expect(first.headers.etag).toBe('"1"');
    const same = await s.call('PUT', '/v1/worlds/prod/object-types/Order', s.admin, order, { 'if-match': '"1"' });
    expect(same.json()).toMatchObject({ version: 1, changed: false });
    const stale = expectProblem(
      await s.call('PUT', '/v1/worlds/prod/object-types/Order', s.admin, order, { 'if-match': '"0"' }),
      412,
    );
    expect(stale.currentVersion).toBe(1);

    const typeChange = { ...order, properties: { ...order.properties, amount: { type: 'double' } } };
    const second = await s.call('PUT', '/v1/worlds/prod/object-types/Order', s.admin, typeChange, {
      'if-match': '"1"',
    });
    expect(second.json()).toMatchObject({
      version: 2,
      breaking: true,
      changes: [
        {
          path: '/objectTypes/Order/properties/amount/type',
          change: 'changed',
          breaking: true,
          reason: 'property type changed',
        },
      ],
    });
    const schema = await s.call('GET', '/v1/worlds/prod/schema');
    expect(schema.json()).toMatchObject({
      version: 2,
      objectTypes: { Order: { apiName: 'Order' } },
      linkTypes: {},
      actionTypes: {},
    });
    const audit = (await outboxAudit(s.control.app.pg))
      .filter((a) => a.world === 'prod' && a.action.startsWith('schema.'))
      .map(({ actor, action, target, result, beforeVersion, afterVersion }) => ({
        actor,
        action,
        target,
        result,
        beforeVersion,
        afterVersion,
      }));
    expect(audit).toEqual([
      {
        actor: 'admin',
        action: 'schema.object-types.put',
        target: 'Order',
        result: 'updated',
        beforeVersion: 0,
        afterVersion: 1,
      },
      // The identical PUT changed nothing, and is recorded as such.
      {
        actor: 'admin',
        action: 'schema.object-types.put',
        target: 'Order',
        result: 'unchanged',
        beforeVersion: 1,
        afterVersion: 1,
      },
      {
        actor: 'admin',
        action: 'schema.object-types.put',
        target: 'Order',
        result: 'updated',
        beforeVersion: 1,
        afterVersion: 2,
      },
    ]);
    const history = await s.call('GET', '/v1/worlds/prod/schema/history');
    expect(history.json().versions.map((v: { version: number; author: string }) => [v.version, v.author])).toEqual([
      [2, 'admin'],
      [1, 'admin'],
    ]);

    const records: IncomingMessage[] = [];
    const broker = testBroker(testEndpoints().kafkaBrokers);
    const reader = { groupId: `${s.prefix}schema-reader`, topic: `${s.prefix}onto.schema` };
    const consumer = await broker.consumer({ groupId: reader.groupId, topics: [reader.topic] });
    await consumer.run(async (batch) => {
      records.push(...batch.messages);
    });
    try {
      await eventually('two schema records', () => records.length >= 2, { timeoutMs: 15_000 });
      await committedToEnd(broker, reader.groupId, reader.topic); // a third one shows up too
    } finally {
      await consumer.disconnect();
    }
    const events = records.map((r) => ({ record: r, event: parseEvent(r.value) }));
    expect(events.map((e) => e.event.version)).toEqual([1, 2]);
    for (const { record, event } of events) {
      expect(record.key).toBe('prod');
      expect(event).toMatchObject({ type: 'schema.updated', world_id: 'prod', key: 'prod', producer: 'control' });
    }
    expect(new Set(records.map((r) => r.partition)).size).toBe(1);
    expect(events[1]?.event.payload).toMatchObject({
      version: 2,
      previousVersion: 1,
      diff: { breaking: true },
      schema: { objectTypes: { Order: {} } },
    });
  });

  it('lets exactly one of two concurrent writers with the same If-Match win; the other gets 412', async () => {
    const head = (await s.call('GET', '/v1/worlds/prod/schema')).json().version;
    const [a, b] = await Promise.all(
      ['A', 'B'].map((suffix) =>
        s.call(
          'PUT',
          `/v1/worlds/prod/object-types/Thing${suffix}`,
          s.admin,
          { ...order, displayName: suffix },
          { 'if-match': `"${head}"` },
        ),
      ),
    );
    expect([a?.statusCode, b?.statusCode].sort()).toEqual([200, 412]);
    expect((await s.call('GET', '/v1/worlds/prod/schema')).json().version).toBe(head + 1);
  });

  it('refuses invalid types with 422 and the JSON path, and keeps what is stored', async () => {
    const before = (await s.call('GET', '/v1/worlds/prod/schema')).json();
    const cases: [string, string, unknown, string][] = [
      [
        'object-types/Bad',
        '/properties/x/type',
        { ...order, properties: { ...order.properties, x: { type: 'money' } } },
        'unknown property type',
      ],
      ['object-types/Bad', '/primaryKey', { ...order, primaryKey: 'nope' }, 'is not one of the properties'],
      [
        'object-types/Bad',
        '/properties/9x',
        { ...order, properties: { ...order.properties, '9x': { type: 'string' } } },
        'must be a name',
      ],
      ['link-types/toGhost', '/to', { from: 'Order', to: 'Ghost', cardinality: 'ONE_TO_MANY' }, 'does not exist'],
      [
        'action-types/paint',
        '/edits/0/values/colour',
        {
          parameters: { id: { type: 'string' } },
          edits: [
            { op: 'modifyObject', objectType: 'Order', pk: { param: 'id' }, values: { colour: { value: 'red' } } },
          ],
        },
        'does not exist on Order',
      ],
    ];
    for (const [path, field, body, message] of cases) {
      const problem = expectProblem(await s.call('PUT', `/v1/worlds/prod/${path}`, s.admin, body), 422);
      expect(problem.errors, path).toContainEqual({ path: field, message: expect.stringContaining(message) });
    }
    expect(
      (
        await s.call('PUT', '/v1/worlds/prod/link-types/placedBy', s.admin, {
          from: 'Order',
          to: 'Order',
          cardinality: 'ONE_TO_MANY',
        })
      ).statusCode,
    ).toBe(200);
    const inUse = expectProblem(await s.call('DELETE', '/v1/worlds/prod/object-types/Order', s.admin), 422);
    expect(inUse.errors).toEqual([{ path: '/linkTypes/placedBy', message: 'link type placedBy still uses Order' }]);
    const after = (await s.call('GET', '/v1/worlds/prod/schema')).json();
    expect(after.version).toBe(before.version + 1); // only the link type was added
    expect(after.objectTypes).toEqual(before.objectTypes);
  });

  it('authorises: a viewer reads, an editor cannot change the schema, another world refuses them', async () => {
    for (const [id, role] of [
      ['vera', 'viewer'],
      ['eddie', 'editor'],
    ]) {
      expect((await s.call('POST', '/v1/users', s.admin, { id })).statusCode).toBe(201);
      expect((await s.call('PUT', `/v1/worlds/prod/members/${id}`, s.admin, { role })).statusCode).toBe(200);
    }
    const [v, e] = [await accessTokenFor(s, 'vera'), await accessTokenFor(s, 'eddie')];
    expect((await s.call('GET', '/v1/worlds/prod/schema', v)).statusCode).toBe(200);
    expectProblem(await s.call('PUT', '/v1/worlds/prod/object-types/X', v, order), 403);
    expectProblem(await s.call('PUT', '/v1/worlds/prod/object-types/X', e, order), 403);
    expectProblem(await s.call('DELETE', '/v1/worlds/prod', e), 403);
    await s.call('POST', '/v1/worlds', s.admin, { id: 'other' });
    expectProblem(await s.call('GET', '/v1/worlds/other/schema', v), 403);
    expectProblem(await s.call('GET', '/v1/worlds/prod/schema', 'not-a-token'), 401);
  });

  it('forks a READY world at an instant, with the schema of that instant', async () => {
    await s.until('other', 'READY');
    const history = (await s.call('GET', '/v1/worlds/prod/schema/history')).json().versions;
    const v1At = history.find((v: { version: number }) => v.version === 1).createdAt;
    const fork = await s.call('POST', '/v1/worlds', s.admin, { id: 'staging', from: { world: 'prod', ref: v1At } });
    expect(fork.statusCode, fork.body).toBe(202);
    expect(fork.json().from).toMatchObject({ world: 'prod', ref: v1At, schemaVersion: 1 });
    const schema = (await s.call('GET', '/v1/worlds/staging/schema')).json();
    expect(schema.version).toBe(1);
    expect(schema.objectTypes.Order.properties.amount.type).toBe('integer'); // as at prod's version 1
    expectProblem(await s.call('POST', '/v1/worlds', s.admin, { id: 'dev-2', from: { world: 'ghost' } }), 404);
    await s.until('staging', 'READY');
  });

  it('tags a point of a world: immutable names, refs no newer than the schema', async () => {
    const head = (await s.call('GET', '/v1/worlds/prod/schema')).json().version;
    const created = await s.call('PUT', '/v1/worlds/prod/tags/v1.0', s.admin, {});
    expect(created.statusCode, created.body).toBe(201);
    expect(created.json()).toMatchObject({ world: 'prod', name: 'v1.0', ref: { control: head }, createdBy: 'admin' });
    expect((await s.call('PUT', '/v1/worlds/prod/tags/v1.0', s.admin, { ref: { control: head } })).statusCode).toBe(
      200,
    );
    expectProblem(await s.call('PUT', '/v1/worlds/prod/tags/v1.0', s.admin, { ref: { control: 1 } }), 409);
    const future = expectProblem(
      await s.call('PUT', '/v1/worlds/prod/tags/next', s.admin, { ref: { control: head + 5 } }),
      422,
    );
    expect(future.errors[0].path).toBe('/ref/control');
    expect((await s.call('PUT', '/v1/worlds/prod/tags/first', s.admin, { ref: { control: 1 } })).statusCode).toBe(201);
    const list = await s.call('GET', '/v1/worlds/prod/tags');
    expect(list.json().tags.map((t: { name: string; ref: { control: number } }) => [t.name, t.ref.control])).toEqual([
      ['first', 1],
      ['v1.0', head],
    ]);
    expect((await s.call('DELETE', '/v1/worlds/prod/tags/first')).statusCode).toBe(204);
    expectProblem(await s.call('GET', '/v1/worlds/prod/tags/first'), 404);
    expectProblem(await s.call('PUT', '/v1/worlds/prod/tags/-bad-', s.admin, {}), 400);
  });

  it('deletes a world: DELETING until data and intelligence dropped it, then DELETED', async () => {
    const res = await s.call('DELETE', '/v1/worlds/staging');
    expect(res.statusCode, res.body).toBe(202);
    expect(res.json().status).toBe('DELETING');
    let status: string | undefined;
    await eventually(
      () => `world staging DELETED, not ${status}`,
      async () => {
        const { rows } = await s.control.app.pg.query(`SELECT status FROM worlds WHERE id = 'staging'`);
        status = rows[0]?.status;
        return status === 'DELETED';
      },
      { intervalMs: 100 },
    );
    expect(status).toBe('DELETED');
    for (const svc of ['data', 'intelligence']) {
      const { rows } = await (s.others[svc] as Service).app.pg.query(`SELECT id FROM worlds WHERE id = 'staging'`);
      expect(rows, svc).toEqual([]);
    }
    expectProblem(await s.call('GET', '/v1/worlds/staging/schema'), 404);
  });

  it('answers bad input on every endpoint with 4xx problem+json', async () => {
    const bad: [string, string, unknown?, Record<string, string>?][] = [
      ['POST', '/v1/worlds', { id: 'Not A Slug' }],
      ['POST', '/v1/worlds', { id: 'ok', extra: 1 }],
      ['POST', '/v1/worlds', { id: 'ok2', from: { world: 'prod', ref: 'latest' } }],
      ['POST', '/v1/worlds', 'not json'],
      ['GET', '/v1/worlds?status=SLEEPING'],
      ['GET', '/v1/worlds/UPPER'],
      ['GET', `/v1/worlds/${'a'.repeat(3000)}`],
      ['DELETE', '/v1/worlds/UPPER'],
      ['GET', '/v1/worlds/prod/schema/history?limit=0'],
      ['PUT', '/v1/worlds/prod/object-types/bad name', order],
      ['PUT', '/v1/worlds/prod/object-types/Order', [1, 2]],
      ['PUT', '/v1/worlds/prod/object-types/Order', order, { 'if-match': 'yesterday' }],
      ['DELETE', '/v1/worlds/prod/link-types/nothing'],
      ['PUT', '/v1/worlds/prod/action-types/a', { edits: 'all' }],
    ];
    for (const [method, url, body, headers] of bad) {
      const res = await s.call(method as never, url, s.admin, body, headers);
      expect(res.statusCode, `${method} ${url}: ${res.body}`).toBeGreaterThanOrEqual(400);
      expect(res.statusCode, `${method} ${url}`).toBeLessThan(500);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    }
  });
});

describe('a world that a service never provisions', () => {
  it('is not forked while PROVISIONING; FAILs after the timeout and tells those that did provision it to drop it', async () => {
    const s = await stack(['data'], 2000); // intelligence never answers
    try {
      expect((await s.call('POST', '/v1/worlds', s.admin, { id: 'doomed' })).statusCode).toBe(202);
      // Certainly not READY: intelligence never confirms. (Forking a world just created by a full
      // stack raced its provisioning, which fast consumers could finish between two requests.)
      const early = expectProblem(
        await s.call('POST', '/v1/worlds', s.admin, { id: 'dev-1', from: { world: 'doomed' } }),
        409,
      );
      expect(early.detail).toContain('PROVISIONING');
      const failed = await s.until('doomed', 'FAILED', 15_000);
      expect(failed.failure).toEqual({ field: null, reason: 'provisioning timed out waiting for intelligence' });
      expect(failed.confirmedBy).toEqual(['data']);
      const dataPg = (s.others.data as Service).app.pg;
      let rows: unknown[] = [{}];
      await eventually(
        'doomed dropped in data',
        async () => {
          rows = (await dataPg.query(`SELECT id FROM worlds WHERE id = 'doomed'`)).rows;
          return rows.length === 0;
        },
        { timeoutMs: 15_000, intervalMs: 100 },
      );
      expect(rows).toEqual([]); // compensated
      // Whatever data reported about the drop has been published and handled by control by then.
      await eventually(
        "data's outbox published",
        async () => (await dataPg.query('SELECT 1 FROM outbox_pending LIMIT 1')).rowCount === 0,
      );
      await committedToEnd(
        testBroker(testEndpoints().kafkaBrokers),
        `${s.prefix}control-worlds`,
        `${s.prefix}onto.storage`,
      );
      const { rows: control } = await s.control.app.pg.query(
        `SELECT status, dropped_by FROM worlds WHERE id = 'doomed'`,
      );
      expect(control[0]?.status).toBe('FAILED');
      expectProblem(await s.call('POST', '/v1/worlds', s.admin, { id: 'child', from: { world: 'doomed' } }), 409);
    } finally {
      await s.close();
    }
  }, 60_000);
});
