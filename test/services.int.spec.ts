import { asyncApiDocument, newEvent, Outbox, TOPIC_NAMES, TOPICS } from '@onto/shared';
import { buildTestService, createTestTopics, testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

describe.each(SERVICES)('$name service', (service) => {
  let built: Awaited<ReturnType<typeof buildTestService>>;

  beforeAll(async () => {
    built = await buildTestService(service as never);
  });
  afterAll(async () => {
    await built?.close();
  });

  it('is alive and ready with PostgreSQL, Redis, Kafka and its migrations', async () => {
    const health = await built.app.inject({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'alive' });

    const ready = await built.app.inject({ method: 'GET', url: '/ready' });
    const body = ready.json();
    expect(body.checks).toMatchObject({
      postgres: { status: 'up' },
      migrations: { status: 'up' },
      redis: { status: 'up' },
      kafka: { status: 'up' },
    });
    if (service.name === 'control') {
      expect(Object.keys(body.checks).sort()).toEqual(['kafka', 'migrations', 'postgres', 'redis']);
      expect(body.status).toBe('ready');
    } else {
      // The replica names its lag and bound; with no control beside it, it may have none yet (ADR 22).
      expect(body.checks.identity).toMatchObject({ boundMs: 300_000 });
      expect(body.status).toBe(body.checks.identity.status === 'up' ? 'ready' : 'degraded');
    }
    expect(ready.statusCode).toBe(200);
  });

  it('answers an unknown route with problem+json and a request id', async () => {
    const res = await built.app.inject({ method: 'GET', url: '/v1/nothing-here?x=1' });
    expect(res.statusCode).toBe(404);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.json()).toMatchObject({ status: 404, title: 'Not Found', instance: '/v1/nothing-here' });
  });

  it('answers a malformed JSON body with problem+json, not 500', async () => {
    const res = await built.app.inject({
      method: 'POST',
      url: '/health',
      headers: { 'content-type': 'application/json' },
      payload: '{"unterminated": ',
    });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ status: 400, type: expect.stringMatching(/malformed-json$/) });
  });

  it('keeps the request id a client sends', async () => {
    const res = await built.app.inject({ method: 'GET', url: '/health', headers: { 'x-request-id': 'abc-123' } });
    expect(res.headers['x-request-id']).toBe('abc-123');
  });

  it('serves Prometheus metrics with process metrics and HTTP latency by route and status', async () => {
    await built.app.inject({ method: 'GET', url: '/health' });
    const res = await built.app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('process_cpu_user_seconds_total');
    expect(res.body).toMatch(
      new RegExp(
        `http_request_duration_seconds_count\\{service="${service.name}",method="GET",route="/health",status="200"\\} [1-9]`,
      ),
    );
  });

  it('serves an OpenAPI document generated from the route schemas', async () => {
    const res = await built.app.inject({ method: 'GET', url: '/docs/json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toMatch(/^3\./);
    expect(doc.info.title).toBe(`onto ${service.name}`);
    expect(doc.paths['/ready'].get.responses).toHaveProperty('503');
  });

  it('serves the AsyncAPI document of the topics it produces', async () => {
    const res = await built.app.inject({ method: 'GET', url: '/docs/asyncapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc).toEqual(asyncApiDocument(service.name as never));
    expect(doc.asyncapi).toBe('3.0.0');
    const own = TOPIC_NAMES.filter((t) => TOPICS[t].producer === service.name);
    expect(own.length).toBeGreaterThan(0);
    expect(Object.keys(doc.channels)).toEqual(expect.arrayContaining(own));
  });
});

describe.each(SERVICES)('$name service outbox', (service) => {
  it('publishes what a transaction enqueues through the relay it runs', async () => {
    const { kafkaBrokers } = testEndpoints();
    const topics = await createTestTopics(kafkaBrokers, 1);
    const built = await buildTestService(service as never, { ONTO_TOPIC_PREFIX: topics.prefix });
    try {
      const event = newEvent({
        type: 'schema.updated',
        worldId: 'relay-check',
        key: 'relay-check',
        version: 1,
        producer: 'control',
        producerSeq: 1,
        payload: {
          version: 1,
          previousVersion: 0,
          diff: { changes: [], breaking: false },
          schema: {},
          author: service.name,
        },
      });
      await new Outbox(built.app.pg, topics.prefix).add({
        event,
        key: TOPICS['onto.schema'].key({ worldId: 'relay-check' }),
      });
      const consumer = await testBroker(kafkaBrokers).consumer({
        groupId: `relay-check-${topics.prefix}`,
        topics: [`${topics.prefix}onto.schema`],
      });
      const received = await new Promise<string>((resolve) => {
        void consumer.run(async (batch) => {
          for (const m of batch.messages) resolve(String(m.value));
        });
      });
      await consumer.disconnect();
      expect(JSON.parse(received)).toMatchObject({ event_id: event.event_id, payload: { author: service.name } });
      const { rows } = await built.app.pg.query(
        'SELECT s.sent_at IS NOT NULL AS sent FROM outbox LEFT JOIN outbox_sent_rows s USING (id) WHERE event_id = $1',
        [event.event_id],
      );
      expect(rows).toEqual([{ sent: true }]);
    } finally {
      await built.close();
      await topics.drop();
    }
  });
});

describe.each(SERVICES)('$name service with Kafka unreachable', (service) => {
  it('answers /ready with 200 degraded naming kafka, the other checks still up', async () => {
    const built = await buildTestService(service as never, { KAFKA_BROKERS: '127.0.0.1:1' });
    try {
      const res = await built.app.inject({ method: 'GET', url: '/ready' });
      // The outbox holds what is written meanwhile: not unready (ADR 22).
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.status).toBe('degraded');
      expect(body.checks.kafka.status).toBe('down');
      expect(body.checks.kafka.error).toContain('127.0.0.1:1');
      expect(body.checks.postgres).toEqual({ status: 'up' });
      expect(body.checks.redis).toEqual({ status: 'up' });
    } finally {
      await built.close();
    }
  });
});

describe.each(SERVICES)('$name service with Redis unreachable', (service) => {
  it('answers /ready with 200 degraded naming redis, PostgreSQL still up', async () => {
    const built = await buildTestService(service as never, { REDIS_URL: 'redis://127.0.0.1:1' });
    try {
      const res = await built.app.inject({ method: 'GET', url: '/ready' });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body.status).toBe('degraded');
      expect(body.checks.redis.status).toBe('down');
      expect(body.checks.postgres).toEqual({ status: 'up' });
      expect(body.checks.migrations).toEqual({ status: 'up' });
    } finally {
      await built.close();
    }
  });
});
