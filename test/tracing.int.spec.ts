import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startTracing } from '@onto/shared';
import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';

// One trace through the three services (docs/adr/0055): spans recorded in memory by the SDK, the
// services in this process, every hop between them over the real Kafka, PostgreSQL and Redis.

const W = 'traced';
const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    creditLimit: { type: 'integer' },
    flagged: { type: 'boolean' },
  },
};
const flagCustomer = {
  parameters: { customer: { type: 'string', required: true } },
  edits: [
    { op: 'modifyObject', objectType: 'Customer', pk: { param: 'customer' }, values: { flagged: { value: true } } },
  ],
};
const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';

const exporter = new InMemorySpanExporter();
const stopTracing = await startTracing({ service: 'test', spanProcessors: [new SimpleSpanProcessor({ exporter })] });

const scope = (s: ReadableSpan) => s.instrumentationScope.name;
const PG_SCOPE = '@opentelemetry/instrumentation-pg';
const REDIS_SCOPE = '@opentelemetry/instrumentation-ioredis';
const idOf = (s: ReadableSpan) => s.spanContext().spanId;
const startNs = (s: ReadableSpan) => BigInt(s.startTime[0]) * 1_000_000_000n + BigInt(s.startTime[1]);
const describeSpan = (s: ReadableSpan) =>
  `${scope(s)} ${SpanKind[s.kind]} ${s.name} ${idOf(s)} <- ${s.parentSpanContext?.spanId ?? 'root'}`;

describe('tracing: one trace from a PUT in data to the action it causes, across Kafka', () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack({ partitions: 1 });
    await s.world(W, { objectTypes: { Customer }, actionTypes: { flagCustomer } });
    const create = async (path: string, body: object) => {
      const res = await s.intelCall('PUT', `/v1/worlds/${W}/${path}`, { body });
      expect(res.statusCode, res.body).toBe(201);
    };
    await create('derived-properties/doubled', { objectType: 'Customer', expression: 'self.creditLimit * 2' });
    await create('rules/risky', {
      objectType: 'Customer',
      condition: 'derived.doubled > 2000',
      alertType: 'credit.high',
      severity: 'critical',
    });
    await create('decision-definitions/flag', {
      rule: 'risky',
      actionType: 'flagCustomer',
      parameters: { customer: 'self.id' },
      approval: 'automatic',
    });
  }, 120_000);
  afterAll(async () => {
    await s?.close();
    await stopTracing?.();
  });

  const traceOf = (traceId: string) =>
    exporter.getFinishedSpans().filter((span) => span.spanContext().traceId === traceId);

  it('PUT → relay → apply, recompute, alert, decision, action → step applied in data → action completed', async () => {
    expect(stopTracing).toBeDefined();
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/c1`, {
      body: { properties: { id: 'c1', creditLimit: 5000 } },
      headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` },
    });
    expect(put.statusCode, put.body).toBe(201);
    const actionId = await s.until('the decision and its action', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/decisions`);
      const decision = (res.json().decisions as { pk: string; actionId: string | null }[]).find((d) => d.pk === 'c1');
      return decision?.actionId ?? undefined;
    });
    await s.until('the action completed', async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/actions/${actionId}`);
      return res.json().status === 'COMPLETED' ? true : undefined;
    });
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/Customer/c1`)).json().properties.flagged).toBe(true);
    // The last hop: intelligence applies its own action.completed (it consumes domain.actions).
    const spans = await s.until('the whole chain in one trace', async () => {
      const found = traceOf(CLIENT_TRACE);
      // intelligence's apply of it (data's consumers apply action.completed too, maybe earlier).
      return found.some((x) => x.name === 'apply action.completed' && scope(x) === 'onto-intelligence')
        ? found
        : undefined;
    });
    const trail = spans.map(describeSpan).join('\n');
    const byId = new Map(spans.map((x) => [idOf(x), x]));
    const one = (service: string, kind: SpanKind, name: RegExp | string, parent?: ReadableSpan) => {
      const matching = spans.filter(
        (x) =>
          scope(x) === `onto-${service}` &&
          x.kind === kind &&
          (typeof name === 'string' ? x.name === name : name.test(x.name)) &&
          (parent === undefined || x.parentSpanContext?.spanId === idOf(parent)),
      );
      expect(matching, `${service} ${SpanKind[kind]} ${name} under ${parent?.name}\n${trail}`).toHaveLength(1);
      return matching[0] as ReadableSpan;
    };

    // data: the request's span continues the client's trace; its event leaves with the relay.
    const request = one('data', SpanKind.SERVER, 'PUT /v1/worlds/:world/objects/:type/:pk');
    expect(request.parentSpanContext?.spanId).toBe(CLIENT_SPAN);
    expect(request.attributes['http.response.status_code']).toBe(201);
    const sentChange = one('data', SpanKind.PRODUCER, /onto\.changes\.objects$/, request);
    // intelligence: applies it (recompute, rule, decision, action start in one transaction) and
    // sends what that caused: the alert, the decision, the step for data.
    const applied = one('intelligence', SpanKind.CONSUMER, 'apply object.created', sentChange);
    const sentByIntelligence = spans.filter(
      (x) => x.parentSpanContext?.spanId === idOf(applied) && x.kind === SpanKind.PRODUCER,
    );
    expect(sentByIntelligence.map((x) => x.name.replace(/^send .*?(domain|onto)\./, '$1.')).sort()).toEqual(
      expect.arrayContaining(['domain.actions', 'domain.alerts', 'domain.decisions']),
    );
    const sentStep = sentByIntelligence.filter((x) => x.name.endsWith('domain.actions'));
    // data: applies the step (the object edited) and answers.
    // Several of data's consumer groups read domain.actions (the steps, the webhooks' queue): the
    // one that applies the step is the one that sends what it caused.
    const step = spans.find(
      (x) =>
        scope(x) === 'onto-data' &&
        x.name === 'apply action.step.requested' &&
        sentStep.some((p) => idOf(p) === x.parentSpanContext?.spanId) &&
        spans.some((c) => c.parentSpanContext?.spanId === idOf(x) && c.kind === SpanKind.PRODUCER),
    );
    expect(step, trail).toBeDefined();
    const sentByData = spans.filter((x) => x.parentSpanContext?.spanId === idOf(step as ReadableSpan));
    expect(
      sentByData.map((x) => x.name).some((n) => n.endsWith('onto.changes.objects')),
      trail,
    ).toBe(true);
    expect(
      sentByData.map((x) => x.name).some((n) => n.endsWith('domain.actions')),
      trail,
    ).toBe(true);
    // intelligence: takes the answer and completes the action; the edit in data comes back too.
    const answered = one(
      'intelligence',
      SpanKind.CONSUMER,
      'apply action.step.completed',
      sentByData.find((x) => x.name.endsWith('domain.actions')),
    );
    const sentCompleted = one('intelligence', SpanKind.PRODUCER, /domain\.actions$/, answered);
    one('intelligence', SpanKind.CONSUMER, 'apply action.completed', sentCompleted);
    one(
      'intelligence',
      SpanKind.CONSUMER,
      'apply object.updated',
      sentByData.find((x) => x.name.endsWith('onto.changes.objects')),
    );

    // Every span's parent is in the trace (or is the client's), and starts before it: causal order.
    for (const span of spans) {
      const parentId = span.parentSpanContext?.spanId;
      if (parentId === CLIENT_SPAN) continue;
      const parent = byId.get(parentId as string);
      expect(parent, `the parent of ${describeSpan(span)}\n${trail}`).toBeDefined();
      expect(startNs(parent as ReadableSpan) <= startNs(span), describeSpan(span)).toBe(true);
    }
    // control too: the PUT's audit record (docs/adr/0084) carries its trace into control's trail.
    expect(new Set(spans.map(scope))).toEqual(new Set(['onto-data', 'onto-intelligence', 'onto-control', PG_SCOPE]));
    one(
      'control',
      SpanKind.CONSUMER,
      'apply audit.recorded',
      sentByData.find((x) => x.name.endsWith('onto.audit')),
    );
    // Below onto's spans, one per SQL statement (pg): data's request ran its write's statements,
    // intelligence's apply its own.
    const sqlUnder = (parent: ReadableSpan) =>
      spans.filter(
        (x) => scope(x) === PG_SCOPE && x.kind === SpanKind.CLIENT && x.parentSpanContext?.spanId === idOf(parent),
      );
    expect(sqlUnder(request).length, `SQL of data's PUT\n${trail}`).toBeGreaterThan(0);
    expect(sqlUnder(applied).length, `SQL of intelligence's apply\n${trail}`).toBeGreaterThan(0);
    for (const x of spans.filter((y) => scope(y) === PG_SCOPE)) {
      expect(x.attributes['db.system'] ?? x.attributes['db.system.name']).toBe('postgresql');
    }

    // The records carry it as the `traceparent` header that docs/asyncapi.json publishes.
    const asyncapi = JSON.parse(readFileSync(fileURLToPath(new URL('../docs/asyncapi.json', import.meta.url)), 'utf8'));
    const headers = new Ajv({ strict: false }).compile(asyncapi.components.messages['object.created'].headers);
    const records = await s.records('onto.changes.objects', (seen) =>
      seen.some((r) => r.event.type === 'object.created' && r.event.payload.pk === 'c1'),
    );
    const created = records.find((r) => r.event.type === 'object.created' && r.event.payload.pk === 'c1');
    expect(created?.record.headers.traceparent).toBe(`00-${CLIENT_TRACE}-${idOf(sentChange)}-01`);
    expect(headers(created?.record.headers), JSON.stringify(headers.errors)).toBe(true);
  });

  it("a Redis command is a span of the request that sends it: an action's Idempotency-Key", async () => {
    const res = await s.intelCall('POST', `/v1/worlds/${W}/actions/flagCustomer`, {
      body: { parameters: { customer: 'c1' } },
      headers: { 'idempotency-key': 'traced-redis-1' },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    const request = await s.until('the request span', async () =>
      exporter
        .getFinishedSpans()
        .find((x) => scope(x) === 'onto-intelligence' && x.name === 'POST /v1/worlds/:world/actions/:actionType'),
    );
    const traceId = request.spanContext().traceId;
    const commands = traceOf(traceId).filter((x) => scope(x) === REDIS_SCOPE);
    // The cached answer looked up, the lock taken, the answer remembered, the lock released.
    expect(commands.length, traceOf(traceId).map(describeSpan).join('\n')).toBeGreaterThanOrEqual(3);
    for (const command of commands) {
      expect(command.kind).toBe(SpanKind.CLIENT);
      expect(command.attributes['db.system'] ?? command.attributes['db.system.name']).toBe('redis');
      expect(command.parentSpanContext?.spanId).toBe(idOf(request));
    }
    // Its SQL too; and no span of pg or ioredis starts a trace of its own (requireParentSpan).
    expect(traceOf(traceId).some((x) => scope(x) === PG_SCOPE)).toBe(true);
    const roots = exporter.getFinishedSpans().filter((x) => x.parentSpanContext === undefined);
    expect(roots.filter((x) => scope(x) === PG_SCOPE || scope(x) === REDIS_SCOPE)).toEqual([]);
  });

  it("a schema change in control is traced into data's and intelligence's apply of it", async () => {
    const schema = await s.controlCall('GET', `/v1/worlds/${W}/schema`);
    const res = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/Order`, {
      body: { displayName: 'Order', primaryKey: 'id', properties: { id: { type: 'string', required: true } } },
      headers: { 'if-match': String(schema.headers.etag) },
    });
    expect(res.statusCode, res.body).toBe(200);
    const request = exporter
      .getFinishedSpans()
      .find((x) => scope(x) === 'onto-control' && x.name === 'PUT /v1/worlds/:world/object-types/:apiName');
    expect(request).toBeDefined();
    const traceId = request?.spanContext().traceId as string;
    // A new trace: the request carried none.
    expect(request?.parentSpanContext).toBeUndefined();
    const spans = await s.until('data and intelligence applied the schema change', async () => {
      const found = traceOf(traceId);
      const applied = found.filter((x) => x.name === 'apply schema.updated');
      return new Set(applied.map(scope)).size === 2 ? found : undefined;
    });
    expect(new Set(spans.map(scope).filter((name) => name.startsWith('onto-')))).toEqual(
      new Set(['onto-control', 'onto-data', 'onto-intelligence']),
    );
  });

  it('a malformed traceparent on a request starts a new trace and fails nothing', async () => {
    const before = new Set(exporter.getFinishedSpans().map((x) => x.spanContext().traceId));
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Customer/c2`, {
      body: { properties: { id: 'c2', creditLimit: 10 } },
      headers: { traceparent: '00-not-a-trace-01' },
    });
    expect(put.statusCode, put.body).toBe(201);
    const request = exporter
      .getFinishedSpans()
      .filter((x) => scope(x) === 'onto-data' && x.kind === SpanKind.SERVER && x.name.startsWith('PUT '))
      .at(-1) as ReadableSpan;
    expect(request.parentSpanContext).toBeUndefined();
    expect(before.has(request.spanContext().traceId)).toBe(false);
    await s.until('c2 applied in intelligence, in the new trace', async () =>
      traceOf(request.spanContext().traceId).some((x) => x.name === 'apply object.created') ? true : undefined,
    );
  });
});
