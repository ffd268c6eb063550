import { type EventEnvelope, newEvent, type Producer, parseEvent } from '@onto/shared';
import { createTestTopics, eventually, type TestService, testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlService, expectProblem } from './control-service.js';

/**
 * Merges as control runs them (issue 17, docs/adr/0037), driven through HTTP. data and
 * intelligence are not running: FAKE DATA and FAKE INTELLIGENCE below are a protocol-level
 * stand-in for them, publishing exactly the replies (merge.planned, merge.conflicts.found,
 * merge.applied, merge.failed, merge.compensated, merge.verified and their intelligence.* twins)
 * each step of the test means. The real services' parts are tested in their own packages.
 */

const TIMEOUT_MS = 8000;
const order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};

interface Merge {
  id: string;
  status: string;
  phase: string;
  dryRun: boolean;
  base: { world: string; schemaVersion: number; dataSeq: number; definitions: number } | null;
  result: { schemaVersion: number; dataSeq: number; definitions: number } | null;
  failure: { service: string; phase: string; status: number; reason: string } | null;
  counts: { conflicts: number; unresolved: number; byType?: Record<string, number> };
  applied: { control: { schemaVersion: number; revertedBy: number | null } | null };
  conflicts: { id: string; type: string; resolution: { take: string | null; by: string } | null }[];
  conflictsNext: string | null;
}

describe('merges of worlds through control', () => {
  let service: TestService<unknown>;
  let topics: Awaited<ReturnType<typeof createTestTopics>>;
  let producer: Producer;
  let admin: string;
  const published: EventEnvelope[] = [];
  let stopReading: () => Promise<void>;

  const call = (method: 'GET' | 'POST' | 'PUT', url: string, payload?: unknown) =>
    service.app.inject({ method, url, payload: payload as never, headers: { authorization: `Bearer ${admin}` } });
  const wait = <T>(what: string | (() => string), probe: () => Promise<T | undefined> | T | undefined) =>
    eventually(what, probe, { timeoutMs: 20_000, intervalMs: 50 });
  const merge = async (target: string, id: string): Promise<Merge> =>
    (await call('GET', `/v1/worlds/${target}/merges/${id}`)).json();
  const until = async (target: string, id: string, status: string, phase = 'done') => {
    let last: Merge | undefined;
    return wait(
      () => `merge ${id} to be ${status}/${phase}, not ${last?.status}/${last?.phase}`,
      async () => {
        last = await merge(target, id);
        return last.status === status && last.phase === phase ? last : undefined;
      },
    );
  };
  /** control's events about a merge (on onto.worlds), in order. */
  const sent = (type: string, mergeId: string) =>
    published.filter((e) => e.type === type && (e.payload as { merge?: string }).merge === mergeId);
  const sentOnce = (type: string, mergeId: string) =>
    wait(`${type} of ${mergeId} published`, () => sent(type, mergeId)[0]);

  /** A reply as data (onto.storage) or intelligence (onto.intelligence) sends it, keyed by the target world. */
  const reply = async (type: string, world: string, payload: Record<string, unknown>) => {
    const fromData = !type.startsWith('intelligence.');
    const event = newEvent({
      type: type as 'merge.planned',
      worldId: world,
      key: world,
      version: 0,
      producer: fromData ? 'data' : 'intelligence',
      producerSeq: 0,
      payload,
    });
    const topic = `${topics.prefix}${fromData ? 'onto.storage' : 'onto.intelligence'}`;
    await producer.send([{ topic, messages: [{ key: world, value: JSON.stringify(event) }] }]);
  };
  const prefix = (svc: 'data' | 'intelligence') => (svc === 'data' ? '' : 'intelligence.');

  // ------------------------------------------------------------ FAKE DATA and FAKE INTELLIGENCE
  const fake = (svc: 'data' | 'intelligence', target: string, merge: string) => ({
    /** conflicts.found (when any), then planned. */
    plan: async (p: { source: number; target: number; conflicts?: Record<string, unknown>[] }) => {
      if (p.conflicts?.length)
        await reply(`${prefix(svc)}merge.conflicts.found`, target, { merge, service: svc, conflicts: p.conflicts });
      await reply(`${prefix(svc)}merge.planned`, target, {
        merge,
        service: svc,
        source: p.source,
        target: p.target,
        changes: { [svc === 'data' ? 'objects' : 'rules']: 3 },
        conflicts: p.conflicts?.length ?? 0,
      });
    },
    applied: (position: number) =>
      reply(`${prefix(svc)}merge.applied`, target, {
        merge,
        service: svc,
        target: position,
        applied: { [svc === 'data' ? 'objects' : 'rules']: 3 },
      }),
    failed: (phase: string, status: number, reason: string) =>
      reply(`${prefix(svc)}merge.failed`, target, { merge, service: svc, phase, status, reason }),
    compensated: () =>
      reply(`${prefix(svc)}merge.compensated`, target, {
        merge,
        service: svc,
        reverted: { [svc === 'data' ? 'objects' : 'rules']: 3 },
        notReverted: [],
      }),
    verified: (verification: string, differences: number) =>
      reply(`${prefix(svc)}merge.verified`, target, {
        merge,
        service: svc,
        verification,
        checked: 10,
        differences,
        sample: differences ? [{ entity: { kind: 'object', type: 'Order', pk: 'o1' }, expected: 1, actual: 2 }] : [],
      }),
  });
  // ------------------------------------------------------------ end of the fakes

  const provision = async (id: string, base?: { world: string; commit: number; definitions: number }) => {
    await wait(`world.created of ${id}`, () => published.find((e) => e.type === 'world.created' && e.world_id === id));
    await reply('world.provisioned', id, {
      service: 'data',
      ...(base ? { base: { world: base.world, commit: base.commit } } : {}),
    });
    await reply('intelligence.world.provisioned', id, {
      service: 'intelligence',
      ...(base ? { base: { world: base.world, definitions: base.definitions } } : {}),
    });
    await wait(`${id} READY`, async () =>
      (await call('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
    );
  };
  /** prod with Order, and a fork staging of it at data commit 10, intelligence position 3. */
  const pair = async (name: string) => {
    const [prod, stg] = [`${name}-prod`, `${name}-stg`];
    expect((await call('POST', '/v1/worlds', { id: prod })).statusCode).toBe(202);
    await provision(prod);
    expect((await call('PUT', `/v1/worlds/${prod}/object-types/Order`, order)).statusCode).toBe(200);
    expect((await call('POST', '/v1/worlds', { id: stg, from: { world: prod } })).statusCode).toBe(202);
    await provision(stg, { world: prod, commit: 10, definitions: 3 });
    return { prod, stg };
  };
  const start = async (target: string, body: Record<string, unknown>) => {
    const res = await call('POST', `/v1/worlds/${target}/merges`, body);
    expect(res.statusCode, res.body).toBe(202);
    expect(res.json().status).toBe('RUNNING');
    return res.json().id as string;
  };
  const schema = async (world: string) => (await call('GET', `/v1/worlds/${world}/schema`)).json();

  beforeAll(async () => {
    const { kafkaBrokers } = testEndpoints();
    topics = await createTestTopics(kafkaBrokers, 2);
    ({ service, admin } = await controlService({
      ONTO_TOPIC_PREFIX: topics.prefix,
      WORLD_PROVISION_TIMEOUT_MS: '120000',
      MERGE_TIMEOUT_MS: String(TIMEOUT_MS),
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
  });
  afterAll(async () => {
    await stopReading?.();
    await producer?.disconnect();
    await service?.close();
    await topics?.drop();
  });

  it('refuses bad input with problem+json naming the field, and stores nothing', async () => {
    const { prod, stg } = await pair('bad');
    const count = async () => (await service.app.pg.query('SELECT count(*)::int AS n FROM merges')).rows[0].n;
    const before = await count();
    expect(
      expectProblem(await call('POST', `/v1/worlds/${prod}/merges`, { source: 'nowhere', strategy: 'MANUAL' }), 404)
        .errors,
    ).toEqual([{ path: '/source', message: 'no world nowhere' }]);
    expectProblem(await call('POST', '/v1/worlds/nowhere/merges', { source: stg, strategy: 'MANUAL' }), 404);
    expect(
      expectProblem(await call('POST', `/v1/worlds/${prod}/merges`, { source: prod, strategy: 'MANUAL' }), 422).errors,
    ).toEqual([{ path: '/source', message: 'must be another world than the target' }]);
    const bad = expectProblem(await call('POST', `/v1/worlds/${prod}/merges`, { source: stg, strategy: 'OURS' }), 400);
    expect(JSON.stringify(bad)).toContain('strategy');
    expectProblem(await call('GET', `/v1/worlds/${prod}/merges/0190a0a0-0000-7000-8000-000000000000`), 404);
    expect(await count()).toBe(before);
  });

  it('a source world named like a prototype member (constructor) is authorised by own roles only', async () => {
    const { prod } = await pair('proto');
    // An owner of the target only: their roles object inherits `constructor` but holds no role there.
    expect((await call('POST', '/v1/users', { id: 'olga' })).statusCode).toBe(201);
    expect((await call('PUT', `/v1/worlds/${prod}/members/olga`, { role: 'owner' })).statusCode).toBe(200);
    const apiToken = (await call('POST', '/v1/users/olga/tokens', {})).json().token;
    const olga = (await service.app.inject({ method: 'POST', url: '/v1/auth/token', payload: { apiToken } })).json()
      .accessToken as string;
    const asOlga = (source: string) =>
      service.app.inject({
        method: 'POST',
        url: `/v1/worlds/${prod}/merges`,
        payload: { source, strategy: 'MANUAL' },
        headers: { authorization: `Bearer ${olga}` },
      });
    const count = async () => (await service.app.pg.query('SELECT count(*)::int AS n FROM merges')).rows[0].n;
    const before = await count();
    expect(expectProblem(await asOlga('constructor'), 404).errors).toEqual([
      { path: '/source', message: 'no world constructor' },
    ]);
    // Once the world exists, the inherited Object constructor is still no role in it.
    expect((await call('POST', '/v1/worlds', { id: 'constructor' })).statusCode).toBe(202);
    await provision('constructor');
    expect(expectProblem(await asOlga('constructor'), 403).detail).toBe('no role in world constructor');
    expect(await count()).toBe(before);
  });

  it('SOURCE_WINS: the base is the fork point, control applies its schema part, both apply → MERGED with the merge commit', async () => {
    const { prod, stg } = await pair('sw');
    const withVat = { ...order, properties: { ...order.properties, vat: { type: 'double' } } };
    expect((await call('PUT', `/v1/worlds/${stg}/object-types/Order`, withVat)).statusCode).toBe(200);
    const id = await start(prod, { source: stg, strategy: 'SOURCE_WINS' });
    const requested = await sentOnce('world.merge.requested', id);
    expect(requested.world_id).toBe(prod);
    expect(requested.payload).toMatchObject({
      merge: id,
      source: stg,
      target: prod,
      strategy: 'SOURCE_WINS',
      dryRun: false,
      base: { world: prod, schemaVersion: 1, dataSeq: 10, definitions: 3 },
      actor: 'admin',
    });
    expect(
      (requested.payload as { schema: typeof withVat & { objectTypes: Record<string, unknown> } }).schema.objectTypes
        .Order,
    ).toMatchObject({
      properties: { vat: { type: 'double' } },
    });
    // A second merge into prod while this one runs: one at a time.
    expectProblem(await call('POST', `/v1/worlds/${prod}/merges`, { source: stg, strategy: 'MANUAL' }), 409);

    const conflict = {
      id: 'd-1',
      type: 'MODIFY_MODIFY',
      entity: { kind: 'object', type: 'Order', pk: 'o1', property: 'amount' },
      base: 1,
      source: 2,
      target: 3,
    };
    await fake('data', prod, id).plan({ source: 100, target: 50, conflicts: [conflict] });
    await fake('intelligence', prod, id).plan({ source: 8, target: 5 });
    const apply = await sentOnce('world.merge.apply', id);
    expect(apply.payload).toMatchObject({ merge: id, schemaVersion: 2 });
    expect((await schema(prod)).objectTypes.Order.properties.vat).toEqual({ type: 'double' });
    expect((await merge(prod, id)).phase).toBe('applying');

    await fake('data', prod, id).applied(120);
    await fake('intelligence', prod, id).applied(9);
    const merged = await until(prod, id, 'MERGED');
    expect(merged.result).toEqual({ schemaVersion: 2, dataSeq: 120, definitions: 9 });
    expect(merged.applied.control).toEqual({ schemaVersion: 2, revertedBy: null });
    expect(merged.counts).toEqual({ conflicts: 1, unresolved: 0, byType: { MODIFY_MODIFY: 1 } });
    expect(merged.conflicts[0]?.resolution).toMatchObject({ take: 'source', by: 'strategy:SOURCE_WINS' });
    const history = (await call('GET', `/v1/worlds/${prod}/merges`)).json();
    expect(history.merges.map((m: Merge) => [m.id, m.status])).toEqual([[id, 'MERGED']]);

    // Merging again: the base moved to the source point the first merge read; nothing conflicts in the schema.
    const again = await start(prod, { source: stg, strategy: 'MANUAL', dryRun: true });
    expect((await sentOnce('world.merge.requested', again)).payload).toMatchObject({
      dryRun: true,
      base: { world: stg, dataSeq: 100, definitions: 8 },
    });
    await fake('data', prod, again).plan({ source: 130, target: 120 });
    await fake('intelligence', prod, again).plan({ source: 9, target: 9 });
    const dry = await until(prod, again, 'MERGED');
    expect(dry).toMatchObject({ dryRun: true, counts: { conflicts: 0 }, applied: { control: null } });
    expect(sent('world.merge.apply', again)).toEqual([]);
    expect((await schema(prod)).version).toBe(2);

    // And back: staging ← prod finds the same point from the other side.
    const back = await start(stg, { source: prod, strategy: 'TARGET_WINS', dryRun: true });
    expect((await sentOnce('world.merge.requested', back)).payload).toMatchObject({
      base: { world: stg, dataSeq: 100, definitions: 8 },
    });

    const metrics = (await service.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/onto_merges_total\{status="MERGED"[^}]*\} [1-9]/);
    expect(metrics).toMatch(/onto_merge_conflicts_total\{type="MODIFY_MODIFY"[^}]*\} [1-9]/);
    expect(metrics).toMatch(/onto_merge_conflict_rate\{world="sw-prod"[^}]*\} 0\.5/);
  });

  it('MANUAL: stops at CONFLICTS, resolves one by one with validation, then apply', async () => {
    const { prod, stg } = await pair('man');
    const amount = (type: unknown) => ({ ...order, properties: { ...order.properties, amount: { type } } });
    expect((await call('PUT', `/v1/worlds/${stg}/object-types/Order`, amount('double'))).statusCode).toBe(200);
    expect((await call('PUT', `/v1/worlds/${prod}/object-types/Order`, amount('string'))).statusCode).toBe(200);
    const id = await start(prod, { source: stg, strategy: 'MANUAL' });
    const requested = await sentOnce('world.merge.requested', id);
    // The schema conflict keeps the target's side until resolved.
    expect(
      (requested.payload as { schema: { objectTypes: { Order: { properties: { amount: unknown } } } } }).schema
        .objectTypes.Order.properties.amount,
    ).toEqual({ type: 'string' });
    await fake('data', prod, id).plan({
      source: 40,
      target: 30,
      conflicts: [
        {
          id: 'd-1',
          type: 'MODIFY_MODIFY',
          entity: { kind: 'object', type: 'Order', pk: 'o1', property: 'amount' },
          base: '1',
          source: '2',
          target: '3',
        },
        {
          id: 'd-2',
          type: 'MODIFY_DELETE',
          entity: { kind: 'object', type: 'Order', pk: 'o2' },
          base: { id: 'o2' },
          source: null,
          target: { id: 'o2', amount: '4' },
        },
      ],
    });
    await fake('intelligence', prod, id).plan({
      source: 6,
      target: 5,
      conflicts: [
        {
          id: 'i-1',
          type: 'RULE_CONFLICT',
          entity: { kind: 'rule', name: 'big' },
          base: {},
          source: { a: 1 },
          target: { a: 2 },
        },
      ],
    });
    const waiting = await until(prod, id, 'CONFLICTS', 'conflicts');
    expect(waiting.counts).toMatchObject({ conflicts: 4, unresolved: 4 });
    expect(waiting.conflicts.map((c) => c.id)).toEqual(['c-1', 'd-1', 'd-2', 'i-1']);
    // Paginated conflicts.
    const page = (await call('GET', `/v1/worlds/${prod}/merges/${id}?conflictLimit=3`)).json();
    expect(page.conflicts).toHaveLength(3);
    const rest = (
      await call('GET', `/v1/worlds/${prod}/merges/${id}?conflictLimit=3&conflicts=${page.conflictsNext}`)
    ).json();
    expect(rest.conflicts.map((c: { id: string }) => c.id)).toEqual(['i-1']);
    expect(rest.conflictsNext).toBeNull();

    const applyEarly = expectProblem(await call('POST', `/v1/worlds/${prod}/merges/${id}/apply`), 409);
    expect(applyEarly.unresolved).toBe(4);
    const resolve = (cid: string, body: unknown) =>
      call('PUT', `/v1/worlds/${prod}/merges/${id}/conflicts/${cid}`, body);

    // c-1: a value must be a valid type; then take source.
    expect(
      expectProblem(await resolve('c-1', { take: 'value', value: { displayName: 'x' } }), 422).errors[0].path,
    ).toMatch(/^\/value/);
    expect((await resolve('c-1', { take: 'source' })).statusCode).toBe(200);
    expectProblem(await resolve('c-1', { take: 'target' }), 409);
    // d-1: the value must fit the merged schema's amount (now double).
    expect(expectProblem(await resolve('d-1', { take: 'value', value: 'lots' }), 422).errors).toEqual([
      { path: '/value', message: 'must be a number' },
    ]);
    expectProblem(await resolve('d-1', { take: 'value' }), 422);
    const d1 = await resolve('d-1', { take: 'value', value: 7.5 });
    expect(d1.statusCode, d1.body).toBe(200);
    expect(d1.json().resolution).toMatchObject({ take: 'value', value: 7.5, by: 'admin' });
    // d-2: a properties map checked against the type, or null.
    expect(
      expectProblem(await resolve('d-2', { take: 'value', value: { id: 'o2', colour: 'red' } }), 422).errors,
    ).toEqual([{ path: '/value/colour', message: 'is not a property of Order' }]);
    expect((await resolve('d-2', { take: 'value', value: null })).statusCode).toBe(200);
    // Another merge's conflict id is not found here.
    expectProblem(
      await call('PUT', `/v1/worlds/${prod}/merges/0190a0a0-0000-7000-8000-000000000000/conflicts/i-1`, {
        take: 'source',
      }),
      404,
    );
    expectProblem(await resolve('d-9', { take: 'source' }), 404);
    expect((await resolve('i-1', { take: 'value', value: { a: 3 } })).statusCode).toBe(200);
    const forwarded = await wait('two resolutions forwarded', () => {
      const r = sent('world.merge.conflict.resolved', id);
      return r.length === 3 ? r : undefined;
    });
    expect(forwarded.map((e) => e.payload)).toEqual([
      { merge: id, conflict: 'd-1', take: 'value', value: 7.5 },
      { merge: id, conflict: 'd-2', take: 'value', value: null },
      { merge: id, conflict: 'i-1', take: 'value', value: { a: 3 } },
    ]);

    const applied = await call('POST', `/v1/worlds/${prod}/merges/${id}/apply`);
    expect(applied.statusCode, applied.body).toBe(202);
    const apply = await sentOnce('world.merge.apply', id);
    expect(
      (apply.payload as { schema: { objectTypes: { Order: { properties: { amount: unknown } } } } }).schema.objectTypes
        .Order.properties.amount,
    ).toEqual({ type: 'double' });
    expect((await schema(prod)).objectTypes.Order.properties.amount).toEqual({ type: 'double' });
    expectProblem(await call('POST', `/v1/worlds/${prod}/merges/${id}/apply`), 409);
    await fake('data', prod, id).applied(45);
    await fake('intelligence', prod, id).applied(7);
    expect((await until(prod, id, 'MERGED')).result).toMatchObject({ dataSeq: 45, definitions: 7 });
  });

  it('a failed apply compensates: control reverts its schema, a part applied late is undone too → COMPENSATED', async () => {
    const { prod, stg } = await pair('comp');
    const before = await schema(prod);
    const withVat = { ...order, properties: { ...order.properties, vat: { type: 'double' } } };
    expect((await call('PUT', `/v1/worlds/${stg}/object-types/Order`, withVat)).statusCode).toBe(200);
    const id = await start(prod, { source: stg, strategy: 'TIMESTAMP_WINS' });
    await fake('data', prod, id).plan({ source: 20, target: 11 });
    await fake('intelligence', prod, id).plan({ source: 4, target: 3 });
    await sentOnce('world.merge.apply', id);
    expect((await schema(prod)).version).toBe(before.version + 1);

    await fake('data', prod, id).failed('apply', 409, 'Order o1 was written since the plan');
    const compensate = await sentOnce('world.merge.compensate', id);
    expect(compensate.payload).toEqual({
      merge: id,
      reason: 'data failed to apply: Order o1 was written since the plan',
    });
    // intelligence applied after the compensation was asked: asked again, and waited for.
    await fake('intelligence', prod, id).applied(6);
    await wait('a second compensate', () => (sent('world.merge.compensate', id).length === 2 ? true : undefined));
    expect((await merge(prod, id)).phase).toBe('compensating');
    await fake('intelligence', prod, id).compensated();
    const done = await until(prod, id, 'COMPENSATED');
    expect(done.failure).toMatchObject({ service: 'data', phase: 'apply', status: 409 });
    expect(done.applied.control).toEqual({ schemaVersion: before.version + 1, revertedBy: before.version + 2 });
    const after = await schema(prod);
    expect(after.version).toBe(before.version + 2);
    expect(after.objectTypes).toEqual(before.objectTypes);
  });

  it('a plan that fails ends FAILED with nothing applied; a silent service fails the merge at the deadline', async () => {
    const { prod, stg } = await pair('fail');
    const id = await start(prod, { source: stg, strategy: 'SOURCE_WINS' });
    await fake('intelligence', prod, id).failed('plan', 422, 'rule big does not parse');
    const failed = await until(prod, id, 'FAILED');
    expect(failed.failure).toMatchObject({ service: 'intelligence', phase: 'plan', status: 422 });
    expect(sent('world.merge.apply', id)).toEqual([]);

    const silent = await start(prod, { source: stg, strategy: 'SOURCE_WINS' });
    await fake('data', prod, silent).plan({ source: 20, target: 11 });
    const timedOut = await until(prod, silent, 'FAILED');
    expect(timedOut.failure).toMatchObject({ service: 'intelligence', phase: 'plan', status: 504 });
    expect(timedOut.failure?.reason).toMatch(/timed out .* waiting for the plan of intelligence/);
  }, 40_000);

  it('two merges into one target at once: one wins; a target schema written since the merge read it fails the apply 409', async () => {
    const { prod, stg } = await pair('race');
    const results = await Promise.all(
      [0, 1, 2].map(() => call('POST', `/v1/worlds/${prod}/merges`, { source: stg, strategy: 'MANUAL' })),
    );
    expect(results.map((r) => r.statusCode).sort()).toEqual([202, 409, 409]);
    const id = results.find((r) => r.statusCode === 202)?.json().id as string;
    const running = await service.app.pg.query(
      "SELECT count(*)::int AS n FROM merges WHERE target = $1 AND status = 'RUNNING'",
      [prod],
    );
    expect(running.rows[0].n).toBe(1);

    // MANUAL with a data conflict: it waits at CONFLICTS, which does not hold the target.
    await fake('data', prod, id).plan({
      source: 20,
      target: 11,
      conflicts: [
        {
          id: 'd-1',
          type: 'MODIFY_MODIFY',
          entity: { kind: 'object', type: 'Order', pk: 'o1', property: 'amount' },
          base: 1,
          source: 2,
          target: 3,
        },
      ],
    });
    await fake('intelligence', prod, id).plan({ source: 4, target: 3 });
    await until(prod, id, 'CONFLICTS', 'conflicts');
    expect((await call('PUT', `/v1/worlds/${prod}/merges/${id}/conflicts/d-1`, { take: 'target' })).statusCode).toBe(
      200,
    );
    // Meanwhile the target's schema moves: control's part cannot apply on a schema it did not merge.
    const customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string' } } };
    expect((await call('PUT', `/v1/worlds/${prod}/object-types/Customer`, customer)).statusCode).toBe(200);
    const version = (await schema(prod)).version;
    const applied = await call('POST', `/v1/worlds/${prod}/merges/${id}/apply`);
    expect(applied.statusCode, applied.body).toBe(202);
    expect(applied.json().status).toBe('FAILED');
    const failed = await merge(prod, id);
    expect(failed.failure).toMatchObject({ service: 'control', phase: 'apply', status: 409 });
    expect(failed.applied.control).toBeNull();
    expect(sent('world.merge.apply', id)).toEqual([]);
    expect((await schema(prod)).version).toBe(version);
  });

  it('a dry run stops at CONFLICTS when an object fails the merged schema, whatever the strategy, and takes no resolution', async () => {
    const { prod, stg } = await pair('dry');
    const id = await start(prod, { source: stg, strategy: 'SOURCE_WINS', dryRun: true });
    await fake('data', prod, id).plan({
      source: 20,
      target: 11,
      conflicts: [
        {
          id: 'd-1',
          type: 'MODIFY_MODIFY',
          entity: { kind: 'object', type: 'Order', pk: 'o1', property: 'amount' },
          base: 1,
          source: 2,
          target: 3,
        },
        {
          id: 'd-2',
          type: 'SCHEMA_CONFLICT',
          entity: { kind: 'object', type: 'Order', pk: 'o9' },
          base: null,
          source: { id: 'o9', amount: 'x' },
          target: null,
          reason: '/amount must be an integer',
        },
      ],
    });
    await fake('intelligence', prod, id).plan({ source: 4, target: 3 });
    const dry = await until(prod, id, 'CONFLICTS');
    expect(dry).toMatchObject({ dryRun: true, counts: { conflicts: 2, unresolved: 1 }, applied: { control: null } });
    expect(dry.conflicts.map((c) => [c.id, c.resolution?.by ?? null])).toEqual([
      ['d-1', 'strategy:SOURCE_WINS'],
      ['d-2', null],
    ]);
    expectProblem(await call('PUT', `/v1/worlds/${prod}/merges/${id}/conflicts/d-2`, { take: 'target' }), 409);
    expectProblem(await call('POST', `/v1/worlds/${prod}/merges/${id}/apply`), 409);
    expect(sent('world.merge.apply', id)).toEqual([]);
    // Finished, it holds nothing: the next merge may start.
    const next = await start(prod, { source: stg, strategy: 'SOURCE_WINS', dryRun: true });
    expect(next).not.toBe(id);
  });

  it('merge-verify: control checks its schema, data and intelligence report theirs', async () => {
    const { prod, stg } = await pair('ver');
    const id = await start(prod, { source: stg, strategy: 'SOURCE_WINS' });
    await fake('data', prod, id).plan({ source: 20, target: 11 });
    await fake('intelligence', prod, id).plan({ source: 4, target: 3 });
    await sentOnce('world.merge.apply', id);
    await fake('data', prod, id).applied(21);
    await fake('intelligence', prod, id).applied(5);
    await until(prod, id, 'MERGED');
    const res = await call('POST', `/v1/admin/worlds/${prod}/merges/${id}/verify`);
    expect(res.statusCode, res.body).toBe(202);
    const v = res.json();
    expect(v).toMatchObject({ merge: id, complete: false, services: { control: { differences: 0 }, data: null } });
    expect(v.services.control.checked).toBeGreaterThan(0);
    expect((await sentOnce('world.merge.verify.requested', id)).payload).toEqual({ merge: id, verification: v.id });
    await fake('data', prod, id).verified(v.id, 1);
    await fake('intelligence', prod, id).verified(v.id, 0);
    const done = await wait('verification complete', async () => {
      const r = (await call('GET', `/v1/admin/worlds/${prod}/merges/${id}/verify`)).json();
      return r.complete ? r : undefined;
    });
    expect(done).toMatchObject({ differences: 1, services: { data: { checked: 10, differences: 1 } } });
  });
});
