import { type EventEnvelope, newEvent, type StepCommand, TOPICS, uuidv7 } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, type Stack } from './stack.js';

const W = 'acts';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', required: true },
    status: { type: { type: 'enum', values: ['open', 'closed'] } },
  },
};
const Customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const placedBy = { from: 'Order', to: 'Customer', cardinality: 'MANY_TO_MANY' };

/**
 * data's side of an action's saga, driven as intelligence would drive it: action.step.requested
 * events published on domain.actions, data's replies read from its outbox.
 */
describe('data applies the steps of actions', () => {
  let s: Stack;
  let send: (event: EventEnvelope) => Promise<void>;
  let closeProducer: () => Promise<void>;

  const step = (
    commands: StepCommand[],
    opts: { actionId?: string; step?: number; phase?: 'forward' | 'compensation' } = {},
  ) => {
    const actionId = opts.actionId ?? uuidv7();
    return newEvent({
      type: 'action.step.requested',
      worldId: W,
      key: TOPICS['domain.actions'].key({ worldId: W, actionId }),
      version: 1,
      producer: 'intelligence',
      producerSeq: 0,
      causedBy: null,
      payload: {
        actionId,
        actionType: 'test',
        step: opts.step ?? 0,
        phase: opts.phase ?? 'forward',
        commands,
        actor: 'tester',
        schemaVersion: 1,
      },
    });
  };

  /** data's replies to a request, from its outbox. */
  const replies = async (request: EventEnvelope) => {
    const { rows } = await s.data.app.pg.query<{ body: string }>(
      `SELECT body FROM outbox WHERE topic = $1 AND (body::jsonb ->> 'caused_by') = $2 ORDER BY id`,
      [`${s.prefix}domain.actions`, request.event_id],
    );
    return rows.map((r) => JSON.parse(r.body) as EventEnvelope);
  };
  const reply = (request: EventEnvelope) =>
    s.until(`the reply to ${request.event_id}`, async () => (await replies(request))[0], 20_000);

  /** The change events a request caused. */
  const changes = async (request: EventEnvelope) => {
    const { rows } = await s.data.app.pg.query<{ body: string }>(
      `SELECT body FROM outbox WHERE topic LIKE $1 AND (body::jsonb ->> 'caused_by') = $2 ORDER BY id`,
      [`${s.prefix}onto.changes.%`, request.event_id],
    );
    return rows.map((r) => JSON.parse(r.body) as EventEnvelope);
  };
  const head = async (type: string, pk: string) =>
    (
      await s.data.app.pg.query<{ version: number; deleted: boolean; properties: Record<string, unknown> | null }>(
        'SELECT version::int, deleted, properties FROM object_heads WHERE world_id = $1 AND type = $2 AND pk = $3',
        [W, type, pk],
      )
    ).rows[0];
  const linkHead = async (from: string, to: string) =>
    (
      await s.data.app.pg.query<{ version: number; deleted: boolean }>(
        `SELECT version::int, deleted FROM link_heads WHERE world_id = $1 AND link_type = 'placedBy'
            AND from_pk = $2 AND to_pk = $3`,
        [W, from, to],
      )
    ).rows[0];

  beforeAll(async () => {
    s = await dataStack();
    await s.world(W, { objectTypes: { Order, Customer }, linkTypes: { placedBy } });
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    send = async (event) => {
      await producer.send([
        { topic: `${s.prefix}domain.actions`, messages: [{ key: event.key, value: JSON.stringify(event) }] },
      ]);
    };
    closeProducer = () => producer.disconnect();
  });
  afterAll(async () => {
    await closeProducer?.();
    await s?.close();
  });

  it('applies a step of several commands in one transaction and replies with what undoing needs', async () => {
    const request = step([
      { op: 'createObject', objectType: 'Customer', pk: 'c-1', properties: {} },
      { op: 'createObject', objectType: 'Order', pk: 'o-1', properties: { amount: 5, status: 'open' } },
      { op: 'createLink', linkType: 'placedBy', from: 'o-1', to: 'c-1' },
    ]);
    await send(request);
    const answer = await reply(request);
    expect(answer.type).toBe('action.step.completed');
    expect(answer.producer).toBe('data');
    expect(answer.key).toBe(request.key);
    expect(answer.payload).toMatchObject({
      actionId: request.payload.actionId,
      step: 0,
      phase: 'forward',
      results: [
        { op: 'createObject', changed: true, version: 1, before: null },
        { op: 'createObject', changed: true, version: 1, before: null },
        { op: 'createLink', changed: true, version: 1, before: null },
      ],
    });
    expect(answer.payload.seq).toBe(answer.producer_seq);
    expect(await head('Order', 'o-1')).toEqual({
      version: 1,
      deleted: false,
      properties: { id: 'o-1', amount: 5, status: 'open' },
    });
    // Each write's change event went out as the REST path sends it, caused by the step.
    expect((await changes(request)).map((e) => e.type)).toEqual(['object.created', 'object.created', 'link.created']);
    const [history] = (
      await s.data.app.pg.query<{ actor: string; request_id: string }>(
        `SELECT actor, request_id FROM object_versions WHERE world_id = $1 AND type = 'Order' AND pk = 'o-1'`,
        [W],
      )
    ).rows;
    expect(history).toEqual({ actor: 'tester', request_id: `action:${request.payload.actionId}:forward:0` });
  });

  it('applies a step delivered twice once, and answers a step asked again with its first reply', async () => {
    const request = step([{ op: 'createObject', objectType: 'Order', pk: 'o-twice', properties: { amount: 1 } }]);
    await send(request);
    await send(request); // the same event again: the inbox drops it
    const first = await reply(request);
    // The same step under another event id (as a re-request would be): not applied again.
    const again = newEvent({ ...toNew(request), eventId: uuidv7() });
    await send(again);
    const second = await reply(again);
    expect(second.payload).toEqual(first.payload);
    const { rows } = await s.data.app.pg.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM object_versions WHERE world_id = $1 AND type = 'Order' AND pk = 'o-twice'`,
      [W],
    );
    expect(rows[0]?.n).toBe(1);
    expect(await head('Order', 'o-twice')).toMatchObject({ version: 1 });
    // One reply per request event, one change event in all: the duplicate, on the same partition
    // before `again`, was handled by the time `again` was answered.
    expect(await replies(request)).toHaveLength(1);
    expect((await changes(request)).length + (await changes(again)).length).toBe(1);
  });

  it('refuses a step whose command the write path refuses, and keeps nothing of it', async () => {
    const missing = step([
      { op: 'createObject', objectType: 'Customer', pk: 'c-refused', properties: {} },
      { op: 'modifyObject', objectType: 'Order', pk: 'nope', properties: { amount: 2 } },
    ]);
    const invalid = step([{ op: 'modifyObject', objectType: 'Order', pk: 'o-1', properties: { amount: 'many' } }]);
    const unknown = step([{ op: 'createObject', objectType: 'Ghost', pk: 'g', properties: {} }]);
    for (const r of [missing, invalid, unknown]) await send(r);
    const refusedMissing = await reply(missing);
    expect(refusedMissing.type).toBe('action.step.refused');
    expect(refusedMissing.payload.reason).toMatchObject({ status: 404, code: 'not-found', command: 1 });
    expect(await head('Customer', 'c-refused')).toBeUndefined(); // the first command was undone
    const refusedInvalid = await reply(invalid);
    expect(refusedInvalid.payload.reason).toMatchObject({
      status: 422,
      command: 0,
      errors: [{ path: '/properties/amount', message: 'must be an integer' }],
    });
    expect(await head('Order', 'o-1')).toMatchObject({ version: 1, properties: { amount: 5 } });
    expect((await reply(unknown)).payload.reason).toMatchObject({ status: 404, code: 'not-found' });
    for (const r of [missing, invalid, unknown]) expect(await changes(r)).toEqual([]);
  });

  it('undoes a delete (object and links) and refuses an undo the object moved on from', async () => {
    await send(step([{ op: 'createObject', objectType: 'Customer', pk: 'c-2', properties: {} }]));
    const setup = step([
      { op: 'createObject', objectType: 'Order', pk: 'o-del', properties: { amount: 9 } },
      { op: 'createLink', linkType: 'placedBy', from: 'o-del', to: 'c-1' },
    ]);
    await send(setup);
    expect((await reply(setup)).type).toBe('action.step.completed');
    const del = step([{ op: 'deleteObject', objectType: 'Order', pk: 'o-del' }]);
    await send(del);
    const deleted = await reply(del);
    expect(deleted.payload.results).toEqual([
      {
        op: 'deleteObject',
        changed: true,
        version: 2,
        before: { version: 1, deleted: false, properties: { id: 'o-del', amount: 9 } },
        removedLinks: [{ linkType: 'placedBy', from: 'o-del', to: 'c-1', version: 2 }],
      },
    ]);
    expect(await linkHead('o-del', 'c-1')).toEqual({ version: 2, deleted: true });

    // A stale undo (the version moved on) is refused, whole.
    const stale = step([
      { op: 'replaceObject', objectType: 'Order', pk: 'o-del', properties: { amount: 9 }, ifVersion: 1 },
    ]);
    await send(stale);
    expect((await reply(stale)).payload.reason).toMatchObject({ status: 412, code: 'precondition-failed' });

    const undo = step(
      [
        { op: 'replaceObject', objectType: 'Order', pk: 'o-del', properties: { id: 'o-del', amount: 9 }, ifVersion: 2 },
        { op: 'createLink', linkType: 'placedBy', from: 'o-del', to: 'c-1', ifVersion: 2 },
      ],
      { actionId: del.payload.actionId as string, phase: 'compensation' },
    );
    await send(undo);
    const undone = await reply(undo);
    expect(undone.type).toBe('action.step.completed');
    expect(await head('Order', 'o-del')).toEqual({
      version: 3,
      deleted: false,
      properties: { id: 'o-del', amount: 9 },
    });
    expect(await linkHead('o-del', 'c-1')).toEqual({ version: 3, deleted: false });
    expect((await changes(undo)).map((e) => e.type)).toEqual(['object.created', 'link.created']);
  });

  it('parks nothing: every step and reply is handled', async () => {
    await s.until('the inbox has no parked events', async () => {
      const { rows } = await s.data.app.pg.query<{ n: number }>('SELECT count(*)::int AS n FROM inbox_deferred');
      return rows[0]?.n === 0 ? true : undefined;
    });
  });
});

/** The NewEvent that makes `e` again (for a copy under another id). */
function toNew(e: EventEnvelope) {
  return {
    type: e.type,
    worldId: e.world_id,
    key: e.key,
    version: e.version,
    producer: e.producer,
    producerSeq: e.producer_seq,
    causedBy: e.caused_by,
    payload: e.payload,
  };
}
