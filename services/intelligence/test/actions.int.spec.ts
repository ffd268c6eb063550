import { randomUUID } from 'node:crypto';
import { type EventEnvelope, inTransaction } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack, Order, reprice } from './stack.js';

const W = 'shop';
const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, name: { type: 'string' } },
};
const placedBy = { from: 'Order', to: 'Customer', cardinality: 'MANY_TO_MANY' };
const str = { type: 'string', required: true };
const actionTypes = {
  // Two steps: the order, then its link to the customer (refused when the customer does not exist).
  placeOrder: {
    parameters: {
      orderId: str,
      customerId: str,
      amount: { type: 'integer', required: true },
      at: { type: 'timestamp' },
    },
    edits: [
      {
        op: 'createObject',
        objectType: 'Order',
        pk: { param: 'orderId' },
        values: { amount: { param: 'amount' }, status: { value: 'open' } },
      },
      { op: 'createLink', linkType: 'placedBy', from: { param: 'orderId' }, to: { param: 'customerId' } },
    ],
  },
  // Two writes of one order, then a link: undone in reverse, one undo after the other.
  bumpAndLink: {
    parameters: { orderId: str, amount: { type: 'integer', required: true }, customerId: str },
    edits: [
      { op: 'modifyObject', objectType: 'Order', pk: { param: 'orderId' }, values: { status: { value: 'closed' } } },
      { op: 'modifyObject', objectType: 'Order', pk: { param: 'orderId' }, values: { amount: { param: 'amount' } } },
      { op: 'createLink', linkType: 'placedBy', from: { param: 'orderId' }, to: { param: 'customerId' } },
    ],
  },
  // The second value does not fit the property: data refuses it (422).
  reprice,
  // A delete (which takes the order's links with it), then a create refused when the customer exists.
  retire: {
    parameters: { orderId: str, customerId: str },
    edits: [
      { op: 'deleteObject', objectType: 'Order', pk: { param: 'orderId' } },
      { op: 'createObject', objectType: 'Customer', pk: { param: 'customerId' }, values: {} },
    ],
  },
  // An order, then a change of order o-held that data refuses (a string for an integer).
  createThenBreak: {
    parameters: { orderId: str, bad: str },
    edits: [
      { op: 'createObject', objectType: 'Order', pk: { param: 'orderId' }, values: { amount: { value: 1 } } },
      { op: 'modifyObject', objectType: 'Order', pk: { value: 'o-held' }, values: { amount: { param: 'bad' } } },
    ],
  },
  // One execution per customer, whatever the Idempotency-Key.
  welcome: {
    parameters: { customerId: str, name: str },
    edits: [
      { op: 'createObject', objectType: 'Customer', pk: { param: 'customerId' }, values: { name: { param: 'name' } } },
    ],
    idempotencyKey: ['customerId'],
  },
};

const FINAL = ['COMPLETED', 'COMPENSATED', 'FAILED'];

describe('actions: idempotent, executed as sagas', () => {
  let s: IntelligenceStack;
  let intel: FastifyInstance;
  let editor: string;
  let viewer: string;

  const post = (actionType: string, parameters: unknown, key?: string, token = editor) =>
    s.intelCall('POST', `/v1/worlds/${W}/actions/${actionType}`, {
      token,
      body: { parameters },
      headers: key === undefined ? {} : { 'idempotency-key': key },
    });
  const action = async (id: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${W}/actions/${id}`, { token: viewer });
    expect(res.statusCode, res.body).toBe(200);
    return res.json();
  };
  const settled = (id: string) =>
    s.until(
      `action ${id} final`,
      async () => {
        const a = await action(id);
        return FINAL.includes(a.status) ? a : undefined;
      },
      30_000,
    );
  const object = async (type: string, pk: string) => {
    const res = await s.dataCall('GET', `/v1/worlds/${W}/objects/${type}/${pk}`);
    return res.statusCode === 200 ? res.json() : null;
  };
  const linked = async (orderId: string) => {
    const res = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/${orderId}/links/placedBy`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json().links.map((l: { pk: string }) => l.pk);
  };
  /** The action's events intelligence published (from its outbox), in order. */
  const published = async (actionId: string) => {
    const { rows } = await intel.pg.query<{ body: string }>(
      'SELECT body FROM outbox WHERE partition_key = $1 ORDER BY id',
      [`${W}/${actionId}`],
    );
    return rows.map((r) => JSON.parse(r.body) as EventEnvelope);
  };
  const actionsWithKey = async (key: string) =>
    (
      await intel.pg.query<{ id: string }>(
        'SELECT id::text FROM actions WHERE world_id = $1 AND idempotency_key = $2',
        [W, key],
      )
    ).rows.map((r) => r.id);

  beforeAll(async () => {
    s = await intelligenceStack();
    if (!s.intelligence) throw new Error('no intelligence');
    intel = s.intelligence.app;
    await s.world(W, { objectTypes: { Order, Customer }, linkTypes: { placedBy }, actionTypes });
    editor = await s.user('ed', W, 'editor');
    viewer = await s.user('vic', W, 'viewer');
    for (const id of ['c-1', 'c-2']) {
      const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/${id}`, { body: { properties: {} } });
      expect(res.statusCode, res.body).toBe(201);
    }
  }, 90_000);
  afterAll(async () => {
    await s?.close();
  });

  it('runs a two-step action to COMPLETED, both edits in data, every step readable', async () => {
    const res = await post('placeOrder', { orderId: 'o-1', customerId: 'c-1', amount: 5 }, 'k-place-1');
    expect(res.statusCode, res.body).toBe(202);
    const body = res.json();
    expect(res.headers.location).toBe(`/v1/worlds/${W}/actions/${body.id}`);
    expect(res.headers['idempotent-replayed']).toBeUndefined();
    expect(res.headers['x-consistency-token']).toMatch(/^data=\d+$/);
    expect(body).toMatchObject({
      actionType: 'placeOrder',
      status: 'RUNNING',
      actor: 'ed',
      idempotencyKey: 'k-place-1',
    });
    expect(body.steps.map((x: { state: string }) => x.state)).toEqual(['REQUESTED', 'PENDING']);

    const done = await settled(body.id);
    expect(done.status).toBe('COMPLETED');
    expect(done.finishedAt).not.toBeNull();
    expect(done.steps).toMatchObject([
      {
        n: 0,
        state: 'COMPLETED',
        command: { op: 'createObject', objectType: 'Order', pk: 'o-1', properties: { amount: 5, status: 'open' } },
        result: [{ op: 'createObject', changed: true, version: 1, before: null }],
      },
      { n: 1, state: 'COMPLETED', command: { op: 'createLink', linkType: 'placedBy', from: 'o-1', to: 'c-1' } },
    ]);
    expect(await object('Order', 'o-1')).toMatchObject({
      version: 1,
      properties: { id: 'o-1', amount: 5, status: 'open' },
    });
    expect(await linked('o-1')).toEqual(['c-1']);

    // The saga on domain.actions, as Kafka holds it: each step asked, answered by data, then the end.
    const records = await s.records('domain.actions', (seen) =>
      seen.some((r) => r.event.type === 'action.completed' && r.event.payload.actionId === body.id),
    );
    const saga = records.filter((r) => r.event.payload.actionId === body.id).map((r) => r.event);
    expect(saga.map((e) => `${e.producer}:${e.type}`)).toEqual([
      'intelligence:action.requested',
      'intelligence:action.step.requested',
      'data:action.step.completed',
      'intelligence:action.step.requested',
      'data:action.step.completed',
      'intelligence:action.completed',
    ]);
    // Each event is caused by the one before it, and the first by nothing that data cannot know.
    expect(saga[0]?.caused_by).toBeNull();
    for (let i = 1; i < saga.length; i++) expect(saga[i]?.caused_by, saga[i]?.type).toBe(saga[i - 1]?.event_id);
    // One key (world + action id): every event of the action on one partition, in order.
    const partitions = records.filter((r) => r.event.payload.actionId === body.id).map((r) => r.record.partition);
    expect(new Set(partitions).size).toBe(1);
  });

  it('replays the stored answer for the same key and parameters, executing once', async () => {
    const parameters = { orderId: 'o-2', customerId: 'c-1', amount: 7 };
    const first = await post('placeOrder', parameters, 'k-place-2');
    expect(first.statusCode, first.body).toBe(202);
    await settled(first.json().id);
    // The same parameters spelled in another key order: the same request.
    const again = await post('placeOrder', { amount: 7, customerId: 'c-1', orderId: 'o-2' }, 'k-place-2');
    expect(again.statusCode).toBe(202);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers.location).toBe(first.headers.location);
    expect(again.json()).toEqual(first.json()); // the first answer, RUNNING as it was
    expect(await actionsWithKey('k-place-2')).toEqual([first.json().id]);
    const events = await published(first.json().id);
    expect(events.filter((e) => e.type === 'action.requested')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'action.step.requested')).toHaveLength(2);
    expect(await object('Order', 'o-2')).toMatchObject({ version: 1 });
    // Another caller's identical key is another request.
    const owner = await s.user('olga', W, 'editor');
    const theirs = await post('placeOrder', { ...parameters, orderId: 'o-2b' }, 'k-place-2', owner);
    expect(theirs.statusCode, theirs.body).toBe(202);
    expect(theirs.headers['idempotent-replayed']).toBeUndefined();
    await settled(theirs.json().id);
  });

  it('refuses the same key with other parameters (422), executing nothing', async () => {
    const first = await post('placeOrder', { orderId: 'o-3', customerId: 'c-1', amount: 1 }, 'k-place-3');
    expect(first.statusCode).toBe(202);
    const other = await post('placeOrder', { orderId: 'o-3', customerId: 'c-1', amount: 2 }, 'k-place-3');
    const problem = expectProblem(other, 422);
    expect(problem.errors).toEqual([
      { path: 'header/idempotency-key', message: expect.stringContaining(first.json().id) },
    ]);
    const otherType = await post('retire', { orderId: 'o-3', customerId: 'c-1' }, 'k-place-3');
    expectProblem(otherType, 422);
    expect(await actionsWithKey('k-place-3')).toEqual([first.json().id]);
    await settled(first.json().id);
    expect(await object('Order', 'o-3')).toMatchObject({ properties: { amount: 1 } });
  });

  it('executes two concurrent requests with one key once: the other gets 409 or the same answer', async () => {
    const parameters = { orderId: 'o-4', customerId: 'c-1', amount: 4 };
    const answers = await Promise.all([1, 2, 3].map(() => post('placeOrder', parameters, 'k-place-4')));
    const statuses = answers.map((a) => a.statusCode).sort();
    expect(statuses.filter((x) => x === 202).length).toBeGreaterThanOrEqual(1);
    for (const a of answers) {
      if (a.statusCode === 409) expect(a.headers['retry-after']).toBe('1');
      else expect(a.statusCode, a.body).toBe(202);
    }
    const ids = await actionsWithKey('k-place-4');
    expect(ids).toHaveLength(1);
    for (const a of answers.filter((x) => x.statusCode === 202)) expect(a.json().id).toBe(ids[0]);
    await settled(ids[0] as string);
    expect((await published(ids[0] as string)).filter((e) => e.type === 'action.requested')).toHaveLength(1);
    expect(await object('Order', 'o-4')).toMatchObject({ version: 1 });
  });

  it('stays correct on PostgreSQL alone: Redis flushed, then Redis down', async () => {
    const parameters = { orderId: 'o-5', customerId: 'c-1', amount: 5 };
    const first = await post('placeOrder', parameters, 'k-place-5');
    expect(first.statusCode).toBe(202);
    // This deployment's keys only: the prefix and the database name keep others' apart in a shared Redis.
    const database = new URL(s.intelligence?.databaseUrl ?? '').pathname.slice(1);
    const cacheKeys = async () => {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const [next, found] = await intel.redis.scan(
          cursor,
          'MATCH',
          `${s.prefix}${database}:onto:idem:*`,
          'COUNT',
          1000,
        );
        cursor = next;
        keys.push(...found);
      } while (cursor !== '0');
      return keys;
    };
    expect((await cacheKeys()).length).toBeGreaterThan(0);
    await intel.redis.del(...(await cacheKeys()));
    const flushed = await post('placeOrder', parameters, 'k-place-5');
    expect(flushed.statusCode).toBe(202);
    expect(flushed.headers['idempotent-replayed']).toBe('true');
    expect(flushed.json().id).toBe(first.json().id);

    intel.redis.disconnect();
    try {
      const down = await post('placeOrder', parameters, 'k-place-5');
      expect(down.statusCode, down.body).toBe(202);
      expect(down.headers['idempotent-replayed']).toBe('true');
      expectProblem(await post('placeOrder', { ...parameters, amount: 6 }, 'k-place-5'), 422);
      // Without the lock, concurrent duplicates meet at the key's primary key: one executes.
      const fresh = { orderId: 'o-6', customerId: 'c-1', amount: 6 };
      const answers = await Promise.all([1, 2, 3].map(() => post('placeOrder', fresh, 'k-place-6')));
      for (const a of answers) expect([202, 409], a.body).toContain(a.statusCode);
      const ids = await actionsWithKey('k-place-6');
      expect(ids).toHaveLength(1);
      await settled(ids[0] as string);
      expect(await object('Order', 'o-6')).toMatchObject({ version: 1 });
    } finally {
      await intel.redis.connect().catch(() => {});
    }
    expect(await actionsWithKey('k-place-5')).toEqual([first.json().id]);
  });

  it('compensates the first step when the second is refused: COMPENSATED, data as before', async () => {
    const res = await post('placeOrder', { orderId: 'o-ghost', customerId: 'nobody', amount: 3 }, 'k-ghost');
    expect(res.statusCode, res.body).toBe(202);
    const done = await settled(res.json().id);
    expect(done.status).toBe('COMPENSATED');
    expect(done.refusal).toMatchObject({ step: 1, phase: 'forward', status: 404, code: 'not-found' });
    expect(done.steps).toMatchObject([
      {
        n: 0,
        state: 'COMPENSATED',
        result: [{ op: 'createObject', changed: true, version: 1 }],
        compensation: [{ op: 'deleteObject', objectType: 'Order', pk: 'o-ghost', ifVersion: 1 }],
        compensationResult: [{ op: 'deleteObject', changed: true, version: 2 }],
      },
      { n: 1, state: 'REFUSED', refusal: { status: 404, message: expect.stringContaining('nobody') } },
    ]);
    expect(await object('Order', 'o-ghost')).toBeNull();
    const types = (await published(res.json().id)).map((e) => e.type);
    expect(types).toEqual([
      'action.requested',
      'action.step.requested',
      'action.step.requested',
      'action.step.requested',
      'action.compensated',
    ]);
  });

  it('undoes two writes of one object in reverse when a later step is refused', async () => {
    const before = await object('Order', 'o-1');
    const res = await post('bumpAndLink', { orderId: 'o-1', amount: 50, customerId: 'nobody' }, 'k-bump');
    const done = await settled(res.json().id);
    expect(done.status).toBe('COMPENSATED');
    expect(done.steps.map((x: { state: string }) => x.state)).toEqual(['COMPENSATED', 'COMPENSATED', 'REFUSED']);
    // Each undo names the version the saga's previous write left.
    expect(done.steps[1].compensation).toEqual([
      {
        op: 'replaceObject',
        objectType: 'Order',
        pk: 'o-1',
        properties: { ...before.properties, status: 'closed' },
        ifVersion: before.version + 2,
      },
    ]);
    expect(done.steps[0].compensation[0]).toMatchObject({ op: 'replaceObject', ifVersion: before.version + 3 });
    expect(await object('Order', 'o-1')).toEqual({ ...before, version: before.version + 4 });

    // A value data's schema refuses (a string for an integer) is a refusal too.
    const bad = await post('reprice', { orderId: 'o-1', price: 'lots' }, 'k-reprice');
    const refused = await settled(bad.json().id);
    expect(refused.status).toBe('COMPENSATED');
    expect(refused.steps[1].refusal).toMatchObject({
      status: 422,
      errors: [{ path: '/properties/amount', message: 'must be an integer' }],
    });
    expect((await object('Order', 'o-1')).properties).toEqual(before.properties);
  });

  it('undoes a delete: the object and the links it took with it come back', async () => {
    expect(await linked('o-2')).toEqual(['c-1']);
    const res = await post('retire', { orderId: 'o-2', customerId: 'c-2' }, 'k-retire');
    const done = await settled(res.json().id);
    expect(done.status).toBe('COMPENSATED');
    expect(done.steps[0].result[0].removedLinks).toEqual([
      { linkType: 'placedBy', from: 'o-2', to: 'c-1', version: 2 },
    ]);
    expect(done.steps[1].refusal).toMatchObject({ status: 412 });
    expect(await object('Order', 'o-2')).toMatchObject({ version: 3, properties: { id: 'o-2', amount: 7 } });
    expect(await linked('o-2')).toEqual(['c-1']);
  });

  it('FAILS when an undo is refused: the object changed under the saga', async () => {
    const seed = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o-held`, {
      body: { properties: { amount: 1 } },
    });
    expect(seed.statusCode).toBe(201);
    // Hold o-held's row in data so that the saga's second step waits for it, refused once it goes on.
    const held = await s.data.app.pg.connect();
    try {
      await held.query('BEGIN');
      await held.query(
        `SELECT 1 FROM object_heads WHERE world_id = $1 AND type = 'Order' AND pk = 'o-held' FOR UPDATE`,
        [W],
      );
      const res = await post('createThenBreak', { orderId: 'o-new', bad: 'x' }, 'k-fail');
      expect(res.statusCode, res.body).toBe(202);
      const id = res.json().id;
      // Meanwhile someone else changes the order the first step created.
      await s.until('o-new created by the first step', async () =>
        (await object('Order', 'o-new')) ? true : undefined,
      );
      const changed = await s.dataCall('PATCH', `/v1/worlds/${W}/objects/Order/o-new`, {
        body: { properties: { amount: 2 } },
      });
      expect(changed.statusCode, changed.body).toBe(200);
      await held.query('COMMIT');
      const done = await settled(id);
      expect(done.status).toBe('FAILED');
      expect(done.steps[0]).toMatchObject({
        state: 'COMPENSATION_REFUSED',
        compensation: [{ op: 'deleteObject', ifVersion: 1 }],
        compensationRefusal: { status: 412, code: 'precondition-failed' },
      });
      expect(done.steps[1]).toMatchObject({ state: 'REFUSED', refusal: { status: 422 } });
      expect((await published(id)).at(-1)?.type).toBe('action.failed');
      // Nothing was overwritten: the other writer's change stands.
      expect(await object('Order', 'o-new')).toMatchObject({ version: 2, properties: { amount: 2 } });
    } finally {
      await held.query('ROLLBACK').catch(() => {});
      held.release();
    }
  });

  it('starts actions for decisions in the caller’s transaction, with the same key records', async () => {
    const start = (parameters: Record<string, unknown>, key: string) =>
      inTransaction(intel.pg, (tx) =>
        intel.actions.start(tx, {
          worldId: W,
          actionType: 'placeOrder',
          parameters,
          idempotencyKey: key,
          actor: 'decision:d-1',
          causedBy: null,
        }),
      );
    const parameters = { orderId: 'o-decided', customerId: 'c-1', amount: 8 };
    const first = await start(parameters, 'decision:d-1');
    expect(first.replayed).toBe(false);
    expect(await start(parameters, 'decision:d-1')).toEqual({ actionId: first.actionId, replayed: true });
    await expect(start({ ...parameters, amount: 9 }, 'decision:d-1')).rejects.toMatchObject({ status: 422 });
    await expect(
      inTransaction(intel.pg, (tx) =>
        intel.actions.start(tx, {
          worldId: W,
          actionType: 'nope',
          parameters,
          idempotencyKey: 'x',
          actor: 'a',
          causedBy: null,
        }),
      ),
    ).rejects.toMatchObject({ status: 404 });
    expect((await settled(first.actionId)).status).toBe('COMPLETED');
  });

  it("keeps one execution per value of the action type's key parameters", async () => {
    const first = await post('welcome', { customerId: 'c-new', name: 'Ann' }, 'k-welcome-1');
    expect(first.statusCode, first.body).toBe(202);
    const second = await post('welcome', { customerId: 'c-new', name: 'Ann' }, 'k-welcome-2');
    expect(second.statusCode).toBe(202);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.json().id).toBe(first.json().id);
    expectProblem(await post('welcome', { customerId: 'c-new', name: 'Bob' }, 'k-welcome-3'), 409);
    await settled(first.json().id);
    expect(await object('Customer', 'c-new')).toMatchObject({ version: 1, properties: { name: 'Ann' } });
  });

  it('lists actions with filters, newest first, through cursors', async () => {
    const all = await s.intelCall('GET', `/v1/worlds/${W}/actions?limit=2`, { token: viewer });
    expect(all.statusCode, all.body).toBe(200);
    expect(all.headers['x-consistency-token']).toMatch(/^data=\d+$/);
    const page = all.json();
    expect(page.actions).toHaveLength(2);
    expect(page.next).toBe(page.actions[1].id);
    const rest = await s.intelCall('GET', `/v1/worlds/${W}/actions?limit=500&cursor=${page.next}`, { token: viewer });
    const ids = [...page.actions, ...rest.json().actions].map((a: { id: string }) => a.id);
    expect(ids).toEqual([...ids].sort().reverse());
    const compensated = await s.intelCall('GET', `/v1/worlds/${W}/actions?status=COMPENSATED&actionType=placeOrder`, {
      token: viewer,
    });
    expect(compensated.json().actions.length).toBeGreaterThan(0);
    for (const a of compensated.json().actions)
      expect(a).toMatchObject({ status: 'COMPENSATED', actionType: 'placeOrder' });
    const byActor = await s.intelCall('GET', `/v1/worlds/${W}/actions?actor=olga`, { token: viewer });
    expect(byActor.json().actions.map((a: { actor: string }) => a.actor)).toEqual(['olga']);
  });

  it('answers bad input on every endpoint with a 4xx problem, storing nothing', async () => {
    const before = (await intel.pg.query<{ n: number }>('SELECT count(*)::int AS n FROM actions')).rows[0]?.n;
    const missing = expectProblem(await post('placeOrder', { orderId: 'x', customerId: 'c-1', amount: 1 }), 400);
    expect(missing.errors).toEqual([
      { path: 'headers/idempotency-key', message: "must have required property 'idempotency-key'" },
    ]);
    const cases: [string, unknown, number, string?][] = [
      ['placeOrder', { orderId: 'x', customerId: 'c-1', amount: 1.5 }, 422, '/parameters/amount'],
      ['placeOrder', { orderId: 'x', customerId: 'c-1' }, 422, '/parameters/amount'],
      ['placeOrder', { orderId: 'x', customerId: 'c-1', amount: 1, extra: 1 }, 422, '/parameters/extra'],
      ['placeOrder', { orderId: 'x', customerId: 'c-1', amount: 1, at: 'yesterday' }, 422, '/parameters/at'],
      ['placeOrder', { orderId: '', customerId: 'c-1', amount: 1 }, 422, '/parameters/orderId'],
      ['noSuchAction', {}, 404],
      ['bad name', {}, 400],
    ];
    for (const [type, parameters, status, path] of cases) {
      const problem = expectProblem(await post(encodeURIComponent(type), parameters, randomUUID()), status);
      if (path)
        expect(
          problem.errors.map((e: { path: string }) => e.path),
          JSON.stringify(problem),
        ).toContain(path);
    }
    for (const key of ['', 'x'.repeat(256), 'tab\there']) {
      expectProblem(await post('placeOrder', { orderId: 'x', customerId: 'c-1', amount: 1 }, key), 400);
    }
    const raw = (body: unknown, headers: Record<string, string> = {}) =>
      s.intelCall('POST', `/v1/worlds/${W}/actions/placeOrder`, {
        body,
        headers: { 'idempotency-key': randomUUID(), ...headers },
      });
    expectProblem(await raw({ parameters: [] }), 400);
    expectProblem(await raw({ params: {} }), 400);
    expectProblem(await raw('not json', { 'content-type': 'application/json' }), 400);
    expectProblem(await post('placeOrder', {}, randomUUID(), viewer), 403);
    expectProblem(await s.intelCall('POST', `/v1/worlds/${W}/actions/placeOrder`, { token: 'nope', body: {} }), 401);
    expectProblem(
      await s.intelCall('POST', `/v1/worlds/nowhere/actions/placeOrder`, {
        body: {},
        headers: { 'idempotency-key': 'k' },
      }),
      404,
    );
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions/not-a-uuid`), 400);
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions/${randomUUID()}`), 404);
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions?status=DONE`), 400);
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions?limit=0`), 400);
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions?cursor=abc`), 400);
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions?bogus=1`), 400);
    expectProblem(await s.intelCall('GET', `/v1/worlds/nowhere/actions`), 404);
    expectProblem(await s.intelCall('GET', `/v1/worlds/${W}/actions`, { token: 'nope' }), 401);
    expect((await intel.pg.query<{ n: number }>('SELECT count(*)::int AS n FROM actions')).rows[0]?.n).toBe(before);
  });

  it('leaves nothing of the sagas parked in either inbox', async () => {
    for (const app of [intel, s.data.app]) {
      await s.until('no parked saga events', async () => {
        const { rows } = await app.pg.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM inbox_deferred WHERE topic = $1 OR (body::jsonb ->> 'caused_by') IN (
             SELECT event_id::text FROM outbox WHERE topic = $1)`,
          [`${s.prefix}domain.actions`],
        );
        return rows[0]?.n === 0 ? true : undefined;
      });
    }
  });
});

describe('short lifetimes: expired keys, steps asked again', () => {
  let s: IntelligenceStack;
  beforeAll(async () => {
    s = await intelligenceStack({
      intelligenceEnv: {
        IDEMPOTENCY_KEY_TTL_MS: '1500',
        IDEMPOTENCY_PRUNE_INTERVAL_MS: '200',
        ACTION_STEP_RETRY_MS: '500',
      },
    });
    await s.world('brief', {
      objectTypes: { Customer },
      actionTypes: {
        welcome: { ...actionTypes.welcome, idempotencyKey: undefined },
        rename: {
          parameters: { customerId: str, name: str },
          edits: [
            {
              op: 'modifyObject',
              objectType: 'Customer',
              pk: { param: 'customerId' },
              values: { name: { param: 'name' } },
            },
          ],
        },
      },
    });
  }, 90_000);
  afterAll(async () => {
    await s?.close();
  });

  it('are pruned after their lifetime, and the key can then run another request', async () => {
    const intel = s.intelligence?.app as FastifyInstance;
    const post = (name: string) =>
      s.intelCall('POST', '/v1/worlds/brief/actions/welcome', {
        body: { parameters: { customerId: `c-${name}`, name } },
        headers: { 'idempotency-key': 'k-brief' },
      });
    const first = await post('a');
    expect(first.statusCode, first.body).toBe(202);
    expectProblem(await post('b'), 422);
    await s.until(
      'the key pruned',
      async () => {
        const { rows } = await intel.pg.query('SELECT 1 FROM idempotency_keys WHERE key = $1', ['k-brief']);
        return rows.length === 0 ? true : undefined;
      },
      15_000,
    );
    const later = await post('b');
    expect(later.statusCode, later.body).toBe(202);
    expect(later.headers['idempotent-replayed']).toBeUndefined();
    expect(later.json().id).not.toBe(first.json().id);
  });

  it('asks again for a step whose reply went astray; data applies it once', async () => {
    const intel = s.intelligence?.app as FastifyInstance;
    const seed = await s.dataCall('PUT', '/v1/worlds/brief/objects/Customer/c-lost', {
      body: { properties: { name: 'Old' } },
    });
    expect(seed.statusCode).toBe(201);
    // data waits on the row while intelligence forgets which request it awaits: the reply to come
    // answers a request it no longer awaits (as if the reply were lost).
    const held = await s.data.app.pg.connect();
    let id: string;
    try {
      await held.query('BEGIN');
      await held.query(
        `SELECT 1 FROM object_heads WHERE world_id = 'brief' AND type = 'Customer' AND pk = 'c-lost' FOR UPDATE`,
      );
      const res = await s.intelCall('POST', '/v1/worlds/brief/actions/rename', {
        body: { parameters: { customerId: 'c-lost', name: 'New' } },
        headers: { 'idempotency-key': 'k-lost' },
      });
      expect(res.statusCode, res.body).toBe(202);
      id = res.json().id;
      await intel.pg.query('UPDATE action_steps SET request_event = $2 WHERE action_id = $1 AND n = 0', [
        id,
        randomUUID(),
      ]);
      await held.query('COMMIT');
    } finally {
      await held.query('ROLLBACK').catch(() => {});
      held.release();
    }
    const done = await s.until(
      'the action completed',
      async () => {
        const a = (await s.intelCall('GET', `/v1/worlds/brief/actions/${id}`)).json();
        return FINAL.includes(a.status) ? a : undefined;
      },
      20_000,
    );
    expect(done.status).toBe('COMPLETED');
    const { rows: requests } = await intel.pg.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox WHERE partition_key = $1 AND (body::jsonb ->> 'type') = 'action.step.requested'`,
      [`brief/${id}`],
    );
    expect(requests[0]?.n).toBeGreaterThanOrEqual(2);
    const { rows: history } = await s.data.app.pg.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM object_versions WHERE world_id = 'brief' AND type = 'Customer' AND pk = 'c-lost'`,
    );
    expect(history[0]?.n).toBe(2); // the seed and one rename
    const customer = await s.dataCall('GET', '/v1/worlds/brief/objects/Customer/c-lost');
    expect(customer.json()).toMatchObject({ version: 2, properties: { name: 'New' } });
  });
});
