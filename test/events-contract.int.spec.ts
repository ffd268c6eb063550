import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  cloudEventSource,
  dlqOf,
  EVENT_TYPES,
  type EventType,
  eventSchemaId,
  payloadFault,
  TOPIC_NAMES,
  validateEvent,
} from '@onto/shared';
import { testEndpoints } from '@onto/shared/testing';
import { Ajv } from 'ajv';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failOverdue } from '../services/control/src/worlds/saga.js';
import { type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

/**
 * The event contract, end to end (docs/adr/0020): a flow through the three services that makes
 * every event type onto produces, then every record of every topic read back from the beginning
 * with a plain Kafka client and checked against the published schema (docs/asyncapi.json, by an
 * independent JSON Schema validator) and its CloudEvents headers. A record without a schema fails.
 */

const W = 'contract';
/** Declared in the catalogue, produced by nothing yet: the only types the flow cannot show. */
const RESERVED: EventType[] = [];
/** The checker's repair requests, produced only on drift: services/control/test/checker.int.spec.ts makes them. */
const ON_DRIFT: EventType[] = ['objects.recount.requested', 'links.recount.requested', 'derived.recompute.requested'];

const str = { type: 'string', required: true };
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: str,
    amount: { type: 'integer', required: true },
    flagged: { type: 'boolean' },
    load: { type: { type: 'series', value: 'double' }, unit: 'kg' },
  },
};
const Customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: str } };
const placedBy = { from: 'Order', to: 'Customer', cardinality: 'MANY_TO_MANY' };
const actionTypes = {
  flagOrder: {
    parameters: { orderId: str },
    edits: [
      { op: 'modifyObject', objectType: 'Order', pk: { param: 'orderId' }, values: { flagged: { value: true } } },
    ],
  },
  // The order, then its link to a customer: refused when the customer does not exist (compensated).
  placeOrder: {
    parameters: { orderId: str, customerId: str },
    edits: [
      { op: 'createObject', objectType: 'Order', pk: { param: 'orderId' }, values: { amount: { value: 1 } } },
      { op: 'createLink', linkType: 'placedBy', from: { param: 'orderId' }, to: { param: 'customerId' } },
    ],
  },
  // An order, then a change of o-held that data refuses; the undo is refused too when o-new changed (failed).
  createThenBreak: {
    parameters: { orderId: str, bad: str },
    edits: [
      { op: 'createObject', objectType: 'Order', pk: { param: 'orderId' }, values: { amount: { value: 1 } } },
      { op: 'modifyObject', objectType: 'Order', pk: { value: 'o-held' }, values: { amount: { param: 'bad' } } },
    ],
  },
};

interface Read {
  topic: string;
  partition: number;
  offset: string;
  key: string;
  value: string;
  headers: Record<string, string>;
}

describe('every event the services produce matches the published contract', () => {
  let s: IntelligenceStack;
  /** What the first test read of onto.changes.objects, for the consumer guide's example to match. */
  let objectRecords: Read[] = [];

  beforeAll(async () => {
    s = await intelligenceStack({ partitions: 2 });
  }, 120_000);
  afterAll(async () => s?.close());

  const ok = async (what: string, res: Promise<{ statusCode: number; body: string }>) => {
    const r = await res;
    expect(r.statusCode, `${what}: ${r.body}`).toBeLessThan(300);
    return JSON.parse(r.body || 'null');
  };
  const settled = (id: string) =>
    s.until<{ status: string }>(
      `action ${id} final`,
      async () => {
        const res = await s.intelCall('GET', `/v1/worlds/${W}/actions/${id}`);
        return ['COMPLETED', 'COMPENSATED', 'FAILED'].includes(res.json().status) ? res.json() : undefined;
      },
      30_000,
    );

  /** Objects, links, alerts, decisions, actions (completed, compensated, failed), identity, worlds. */
  async function runFlow() {
    await s.world(W, { objectTypes: { Order, Customer }, linkTypes: { placedBy }, actionTypes });
    await ok(
      'rule',
      s.intelCall('PUT', `/v1/worlds/${W}/rules/big`, {
        body: { objectType: 'Order', condition: 'self.amount > 100', alertType: 'order.big', severity: 'critical' },
      }),
    );
    for (const [name, approval] of [
      ['flag', 'automatic'],
      ['review', 'manual'],
    ]) {
      await ok(
        `decision definition ${name}`,
        s.intelCall('PUT', `/v1/worlds/${W}/decision-definitions/${name}`, {
          body: { rule: 'big', actionType: 'flagOrder', parameters: { orderId: 'self.id' }, approval },
        }),
      );
    }
    // Raised (decisions made, one executed as an action), then cleared.
    await ok(
      'big order',
      s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o-1`, { body: { properties: { amount: 500 } } }),
    );
    await s.until('o-1 flagged by the automatic decision', async () => {
      const res = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o-1`);
      return res.json().properties?.flagged === true ? true : undefined;
    });
    await ok(
      'small order',
      s.dataCall('PATCH', `/v1/worlds/${W}/objects/Order/o-1`, { body: { properties: { amount: 5 } } }),
    );
    await ok('recount', s.dataCall('POST', `/v1/admin/worlds/${W}/object-types/Order/recount`)); // object.announced
    await ok(
      'points',
      s.dataCall('POST', `/v1/worlds/${W}/series/Order/o-1/load`, {
        body: { points: [{ time: '2026-01-01T00:00:00Z', value: 1.5 }] },
      }),
    );
    await ok('customer', s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/c-1`, { body: { properties: {} } }));
    await ok('link', s.dataCall('PUT', `/v1/worlds/${W}/links/placedBy/o-1/c-1`));
    await ok('link recount', s.dataCall('POST', `/v1/admin/worlds/${W}/link-types/placedBy/recount`)); // link.announced
    await ok('unlink', s.dataCall('DELETE', `/v1/worlds/${W}/links/placedBy/o-1/c-1`));
    await ok('delete', s.dataCall('DELETE', `/v1/worlds/${W}/objects/Customer/c-1`));

    // A step refused: the saga compensates.
    const ghost = await ok(
      'placeOrder',
      s.intelCall('POST', `/v1/worlds/${W}/actions/placeOrder`, {
        body: { parameters: { orderId: 'o-2', customerId: 'nobody' } },
        headers: { 'idempotency-key': 'k-ghost' },
      }),
    );
    expect((await settled(ghost.id)).status).toBe('COMPENSATED');
    // A step refused and its undo refused: the saga fails (o-held held so that o-new changes first).
    await ok(
      'o-held',
      s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o-held`, { body: { properties: { amount: 1 } } }),
    );
    const held = await s.data.app.pg.connect();
    try {
      await held.query('BEGIN');
      await held.query(
        `SELECT 1 FROM object_heads WHERE world_id = $1 AND type = 'Order' AND pk = 'o-held' FOR UPDATE`,
        [W],
      );
      const failing = await ok(
        'createThenBreak',
        s.intelCall('POST', `/v1/worlds/${W}/actions/createThenBreak`, {
          body: { parameters: { orderId: 'o-new', bad: 'x' } },
          headers: { 'idempotency-key': 'k-fail' },
        }),
      );
      await s.until('o-new created', async () =>
        (await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o-new`)).statusCode === 200 ? true : undefined,
      );
      await ok(
        'o-new changed',
        s.dataCall('PATCH', `/v1/worlds/${W}/objects/Order/o-new`, { body: { properties: { amount: 2 } } }),
      );
      await held.query('COMMIT');
      expect((await settled(failing.id)).status).toBe('FAILED');
    } finally {
      held.release();
    }

    // Identity: a member's role granted (by s.user), then their access token revoked.
    const member = await s.user('mia', W, 'viewer');
    expect((await s.controlCall('DELETE', '/v1/auth/token', { token: member })).statusCode).toBe(204);

    // A world-level tag: control asks data and intelligence for their positions, both reply.
    await ok('tag', s.controlCall('PUT', `/v1/worlds/${W}/tags/contract-1`, { body: {} }));
    await s.until('the tag complete', async () =>
      (await s.controlCall('GET', `/v1/worlds/${W}/tags/contract-1`)).json().status === 'COMPLETE' ? true : undefined,
    );
    // Deleting it tells data and intelligence to forget its name (world.tag.deleted).
    expect((await s.controlCall('DELETE', `/v1/worlds/${W}/tags/contract-1`)).statusCode).toBe(204);

    // A protection (docs/adr/0058), set unprotecting: world.protection.updated. The rule PUT above
    // made intelligence.rules.changed.
    await ok('protection', s.controlCall('PUT', `/v1/worlds/${W}/protection`, { body: { requireMerge: false } }));
    // A retention policy (docs/adr/0072): world.retention.updated. Ten years: nothing is pruned.
    await ok('retention', s.controlCall('PUT', `/v1/worlds/${W}/retention`, { body: { keepDays: 3650 } }));

    // Merges (docs/adr/0037): a fork and W both change an order and the rule; a MANUAL merge finds a
    // conflict in data and one in intelligence, resolved, applied and verified. Then a merge whose
    // data part fails (the target moved after the plan) and one whose intelligence part fails: each
    // compensates the other.
    const F = 'contract-fork';
    await ok(
      'merge order',
      s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/o-merge`, {
        body: { properties: { id: 'o-merge', amount: 1 } },
      }),
    );
    await ok('fork', s.controlCall('POST', '/v1/worlds', { body: { id: F, from: { world: W } } }));
    await s.until('the fork READY', async () =>
      (await s.controlCall('GET', `/v1/worlds/${F}`)).json().status === 'READY' ? true : undefined,
    );
    const bigRule = (amount: number) => ({
      body: { objectType: 'Order', condition: `self.amount > ${amount}`, alertType: 'order.big', severity: 'critical' },
    });
    const amount = (world: string, value: number) =>
      ok(
        'order amount',
        s.dataCall('PATCH', `/v1/worlds/${world}/objects/Order/o-merge`, { body: { properties: { amount: value } } }),
      );
    const mergeSettled = (id: string, statuses: string[]) =>
      s.until(
        `merge ${id}`,
        async () => {
          const m = (await s.controlCall('GET', `/v1/worlds/${W}/merges/${id}`)).json();
          return statuses.includes(m.status) ? m : undefined;
        },
        60_000,
      );
    const manualMerge = async () => {
      const { id } = await ok(
        'merge',
        s.controlCall('POST', `/v1/worlds/${W}/merges`, { body: { source: F, strategy: 'MANUAL' } }),
      );
      const m = await mergeSettled(id, ['CONFLICTS']);
      for (const c of m.conflicts as { id: string }[])
        await ok(
          'resolve',
          s.controlCall('PUT', `/v1/worlds/${W}/merges/${id}/conflicts/${c.id}`, { body: { take: 'source' } }),
        );
      return id as string;
    };
    await amount(F, 2);
    await amount(W, 3);
    await ok('fork rule', s.intelCall('PUT', `/v1/worlds/${F}/rules/big`, bigRule(200)));
    await ok('rule', s.intelCall('PUT', `/v1/worlds/${W}/rules/big`, bigRule(300)));
    const merged = await manualMerge();
    await ok('apply', s.controlCall('POST', `/v1/worlds/${W}/merges/${merged}/apply`));
    expect((await mergeSettled(merged, ['MERGED', 'FAILED', 'COMPENSATED'])).status).toBe('MERGED');
    await ok('verify', s.controlCall('POST', `/v1/admin/worlds/${W}/merges/${merged}/verify`));
    await s.until('verified', async () => {
      const res = await s.controlCall('GET', `/v1/admin/worlds/${W}/merges/${merged}/verify`);
      return res.statusCode === 200 && res.json().complete ? true : undefined;
    });
    for (const failing of ['data', 'intelligence']) {
      await amount(F, failing === 'data' ? 4 : 6);
      await amount(W, failing === 'data' ? 5 : 7);
      await ok('fork rule', s.intelCall('PUT', `/v1/worlds/${F}/rules/big`, bigRule(failing === 'data' ? 400 : 600)));
      await ok('rule', s.intelCall('PUT', `/v1/worlds/${W}/rules/big`, bigRule(failing === 'data' ? 500 : 700)));
      const id = await manualMerge();
      // The target moves after the plan, in the part that is to fail.
      if (failing === 'data') await amount(W, 50);
      else await ok('rule moved', s.intelCall('PUT', `/v1/worlds/${W}/rules/big`, bigRule(800)));
      await ok('apply', s.controlCall('POST', `/v1/worlds/${W}/merges/${id}/apply`));
      expect((await mergeSettled(id, ['MERGED', 'FAILED', 'COMPENSATED'])).status).toBe('COMPENSATED');
    }

    // A proposal with a required check (docs/adr/0085): control asks data to stage the objects
    // (world.merge.stage.requested → merge.staged) and intelligence to check them
    // (world.merge.check.requested → intelligence.merge.checked).
    await s.until('a protection with a check', async () => {
      const res = await s.controlCall('PUT', `/v1/worlds/${W}/protection`, {
        body: { requireMerge: false, requiredChecks: ['big'] },
      });
      return res.statusCode === 200 ? true : undefined;
    });
    const { id: proposal } = await ok(
      'proposal',
      s.controlCall('POST', `/v1/worlds/${W}/merges`, { body: { source: F, strategy: 'SOURCE_WINS' } }),
    );
    await s.until(
      'the checks ran',
      async () => {
        const m = (await s.controlCall('GET', `/v1/worlds/${W}/merges/${proposal}`)).json();
        return ['passed', 'failed'].includes(m.proposal?.checks?.state) ? true : undefined;
      },
      60_000,
    );
    await ok('protection', s.controlCall('PUT', `/v1/worlds/${W}/protection`, { body: { requireMerge: false } }));

    // A fork at a commit data has not reached: data refuses it and control fails the world.
    await ok(
      'fork ahead of data',
      s.controlCall('POST', '/v1/worlds', { body: { id: 'ahead', from: { world: W, ref: '999999999999' } } }),
    );
    await s.until('the fork ahead of data failed', async () =>
      (await s.controlCall('GET', '/v1/worlds/ahead')).json().status === 'FAILED' ? true : undefined,
    );

    // A world deleted, and one failed past its provisioning deadline: both dropped by data and intelligence.
    for (const id of ['gone', 'doomed']) await s.world(id);
    await ok('delete world', s.controlCall('DELETE', '/v1/worlds/gone'));
    await s.control.app.pg.query(
      `UPDATE worlds SET status = 'PROVISIONING', deadline_at = now() - interval '1 second' WHERE id = 'doomed'`,
    );
    await failOverdue(s.control.app.pg, s.prefix);

    // A consistency check: check.requested, answered by storage.check.reported and intelligence.check.reported.
    expect(
      await (s.control.app as unknown as { checker: { runCheck(): Promise<unknown> } }).checker.runCheck(),
    ).not.toBeNull();
  }

  it('on every topic, from the beginning: each record has a schema, fits it, and carries CloudEvents headers', async () => {
    await runFlow();
    const kafka = new Kafka({
      brokers: testEndpoints().kafkaBrokers.split(','),
      clientId: 'contract-reader',
      logLevel: logLevel.NOTHING,
    });
    const topics = TOPIC_NAMES.flatMap((t) => [t, dlqOf(t)]);
    const physical = (t: string) => `${s.prefix}${t}`;
    const records: Read[] = [];
    const consumer = kafka.consumer({ groupId: `${s.prefix}contract-${Date.now()}`, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topics: topics.map(physical), fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ topic, partition, message }) => {
        records.push({
          topic: topic.slice(s.prefix.length),
          partition,
          offset: message.offset,
          key: message.key?.toString('utf8') ?? '',
          value: message.value?.toString('utf8') ?? '',
          headers: Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)])),
        });
      },
    });
    const expected = (Object.keys(EVENT_TYPES) as EventType[]).filter(
      (t) => !RESERVED.includes(t) && !ON_DRIFT.includes(t),
    );
    const typesSeen = () => new Set(records.map((r) => r.headers.ce_type));
    try {
      await s.until(
        'every event type on its topic',
        async () => (expected.every((t) => typesSeen().has(t)) ? true : undefined),
        60_000,
      );
      // Then everything the topics hold now, to their ends.
      const admin = kafka.admin();
      await admin.connect();
      const ends = (
        await Promise.all(topics.map(async (t) => [t, await admin.fetchTopicOffsets(physical(t))] as const))
      ).flatMap(([t, partitions]) =>
        partitions.map((p) => ({ topic: t, partition: p.partition, end: BigInt(p.high) })),
      );
      await admin.disconnect();
      await s.until('every record up to the topics ends', async () =>
        ends.every(
          (e) =>
            e.end === 0n ||
            records.some((r) => r.topic === e.topic && r.partition === e.partition && BigInt(r.offset) + 1n >= e.end),
        )
          ? true
          : undefined,
      );
    } finally {
      await consumer.disconnect();
    }

    // The published document, checked by a validator that is not the producers' own.
    const asyncapi = JSON.parse(readFileSync(fileURLToPath(new URL('../docs/asyncapi.json', import.meta.url)), 'utf8'));
    const ajv = new Ajv({ strict: false, allErrors: false });
    const published = new Map<string, ReturnType<Ajv['compile']>>(
      Object.entries(asyncapi.components.messages as Record<string, { payload: object }>)
        .filter(([name]) => name !== 'dead-letter')
        .map(([name, message]) => [name, ajv.compile(message.payload)]),
    );
    // Its headers too: the optional ones (traceparent, x-request-id) fit their schemas when present.
    const publishedHeaders = new Map<string, ReturnType<Ajv['compile']>>(
      Object.entries(asyncapi.components.messages as Record<string, { headers: object }>)
        .filter(([name]) => name !== 'dead-letter')
        .map(([name, message]) => [name, ajv.compile(message.headers)]),
    );

    const faults: string[] = [];
    for (const r of records) {
      const at = `${r.topic}/${r.partition}@${r.offset}`;
      if (r.topic.endsWith('.dlq')) {
        faults.push(`${at}: a dead letter (${r.headers['onto-error']})`);
        continue;
      }
      let event: ReturnType<typeof validateEvent>;
      try {
        event = validateEvent(JSON.parse(r.value));
      } catch (error) {
        faults.push(`${at}: ${(error as Error).message}`);
        continue;
      }
      const check = published.get(event.type);
      if (!check) {
        faults.push(`${at}: ${event.type} has no published schema`);
        continue;
      }
      if (!check(event)) faults.push(`${at} ${event.type}: ${ajv.errorsText(check.errors)}`);
      const headersCheck = publishedHeaders.get(event.type);
      if (headersCheck && !headersCheck(r.headers)) {
        faults.push(`${at} ${event.type} headers: ${ajv.errorsText(headersCheck.errors)}`);
      }
      const fault = payloadFault(event.type, event.payload);
      if (fault) faults.push(`${at} ${event.type}: ${fault.path} ${fault.reason}`);
      if (EVENT_TYPES[event.type] !== r.topic) faults.push(`${at}: ${event.type} on the wrong topic`);
      if (r.key !== event.key) faults.push(`${at}: record key ${r.key} is not the envelope key ${event.key}`);
      const want = {
        'onto-event-id': event.event_id,
        ce_specversion: '1.0',
        ce_id: event.event_id,
        ce_type: event.type,
        ce_source: cloudEventSource(event.producer),
        ce_time: event.occurred_at,
        ce_subject: event.key,
        ce_dataschema: eventSchemaId(event.type),
        ce_worldid: event.world_id,
        'content-type': 'application/json',
      };
      for (const [name, value] of Object.entries(want)) {
        if (r.headers[name] !== value)
          faults.push(`${at} ${event.type}: header ${name} is ${r.headers[name]}, not ${value}`);
      }
    }
    objectRecords = records.filter((r) => r.topic === 'onto.changes.objects');
    expect(faults).toEqual([]);
    expect([...typesSeen()].sort()).toEqual(expected.sort());
    expect(records.length).toBeGreaterThan(expected.length);
  }, 240_000);
  it("runs the consumer guide's kcat + jq example: one line per event, filtered on ce_type, duplicates dropped", async () => {
    const updates = objectRecords.filter((r) => r.headers.ce_type === 'object.updated');
    expect(updates.length).toBeGreaterThan(1);
    // A redelivery, as at-least-once delivery may make one: the same record once more.
    const kafka = new Kafka({ brokers: testEndpoints().kafkaBrokers.split(','), logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    const again = updates[0] as Read;
    await producer.send({
      topic: `${s.prefix}onto.changes.objects`,
      messages: [{ key: again.key, value: again.value, headers: again.headers, partition: again.partition }],
    });
    await producer.disconnect();
    const script = fileURLToPath(new URL('../docs/examples/consume.sh', import.meta.url));
    const output = execFileSync(
      'bash',
      [script, testEndpoints().kafkaBrokers, `${s.prefix}onto.changes.objects`, 'object.updated'],
      { encoding: 'utf8' },
    );
    const lines = output
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.id).sort()).toEqual(updates.map((r) => r.headers.ce_id).sort());
    expect(new Set(lines.map((l) => l.type))).toEqual(new Set(['object.updated']));
    expect(lines.find((l) => l.subject === `${W}/Order/o-1` && l.payload.after?.amount === 5)).toMatchObject({
      world: W,
      payload: { type: 'Order', pk: 'o-1', before: { amount: 500 } },
    });
  });
});
