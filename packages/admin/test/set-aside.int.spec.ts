import { canonicalJson, laneOf } from '@onto/shared';
import { eventually, outboxAudit, testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, expectProblem, type Stack } from '../../../services/data/test/stack.js';
import { orderEvent } from '../../shared/test/kernel.js';
import { KafkaTools } from '../src/kafka.js';
import { EXIT } from '../src/main.js';
import { runCli } from './cli.js';

/**
 * `onto-admin outbox set-aside` against control and data on ports of their own: data's links
 * topic takes records of at most LIMIT bytes (its max.message.bytes, lowered), so an event forced
 * into data's outbox past it is refused by the broker for real and set aside.
 */
const LIMIT = 4096;

describe('onto-admin outbox set-aside against the running stack', () => {
  let s: Stack;
  let globals: string[];
  let limited: string;
  let broker: Awaited<ReturnType<ReturnType<typeof testBroker>['admin']>>;
  const kafka = new KafkaTools(testEndpoints().kafkaBrokers);

  const run = (...args: string[]) => runCli(globals, ...args);

  /** Sets the limited topic's max.message.bytes and waits until the broker reports it. */
  async function limitTo(bytes: number) {
    await broker.alterTopicConfig(limited, { 'max.message.bytes': String(bytes) });
    await eventually(`${limited} limited to ${bytes} bytes`, async () => {
      return (await broker.maxMessageBytes([limited])).get(limited) === bytes;
    });
  }

  /** The records of the limited topic that carry `eventId`. */
  async function delivered(eventId: string) {
    const log = await kafka.log(limited);
    const records = await kafka.read(
      limited,
      log.map((p) => ({ partition: p.partition, from: p.low, to: p.high })),
    );
    return records.filter((r) => r.headers['onto-event-id'] === eventId);
  }

  const setAsideRows = async () =>
    (
      await s.data.app.pg.query<{ event_id: string; redriven_at: Date | null }>(
        'SELECT event_id::text, redriven_at FROM outbox_set_aside ORDER BY id',
      )
    ).rows;

  beforeAll(async () => {
    const pool = { DB_POOL_MAX: '5' };
    s = await dataStack({ partitions: 1, controlEnv: pool, dataEnv: pool });
    const urls: string[] = [];
    for (const app of [s.control.app, s.data.app]) urls.push(await app.listen({ port: 0, host: '127.0.0.1' }));
    globals = [
      '--json',
      '--control-url',
      urls[0] as string,
      '--data-url',
      urls[1] as string,
      // No intelligence in this stack: nothing answers there.
      '--intelligence-url',
      'http://127.0.0.1:9',
      '--token',
      s.admin,
    ];
    limited = `${s.prefix}onto.changes.links`;
    broker = await testBroker(testEndpoints().kafkaBrokers).admin();
    await limitTo(LIMIT);
    await s.identityKnown();
  }, 120_000);
  afterAll(async () => {
    await broker?.disconnect();
    await kafka.close();
    await s?.close();
  });

  it('has --help on each command, naming the exit codes', async () => {
    for (const command of [
      ['outbox', 'set-aside'],
      ['outbox', 'set-aside', 'list'],
      ['outbox', 'set-aside', 'redrive'],
    ]) {
      const help = await run(...command, '--help');
      expect(help.code, command.join(' ')).toBe(EXIT.ok);
      if (command.length === 3) expect(help.out).toContain('Exit codes:');
    }
  });

  it('lists an event the broker refused, redrives it once the limit is raised, and it is delivered once', async () => {
    expect((await run('outbox', 'set-aside', 'list', '--service', 'data')).json()).toEqual([]);
    expect((await run('outbox', 'set-aside', 'redrive', '--service', 'data')).code).toBe(EXIT.nothingToDo);

    // Straight into data's outbox, past the Outbox's own check at the write.
    const message = orderEvent('big', 1);
    const event = { ...message.event, payload: { ...message.event.payload, padding: 'p'.repeat(2 * LIMIT) } };
    await s.data.app.pg.query(
      `WITH added AS (
         INSERT INTO outbox (event_id, topic, partition_key, lane, body) VALUES ($1, $2, $3, $4, $5) RETURNING id, lane
       ) INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM added`,
      [event.event_id, limited, message.key, laneOf(message.key), canonicalJson(event)],
    );

    const listed = await s.until('the refused event listed', async () => {
      const res = await run('outbox', 'set-aside', 'list', '--service', 'data');
      expect(res.code, res.err).toBe(EXIT.ok);
      const events = res.json() as {
        id: number;
        eventId: string;
        topic: string;
        key: string;
        reason: string;
        bytes: number;
      }[];
      return events.length > 0 ? events : undefined;
    });
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ eventId: event.event_id, topic: limited, key: message.key });
    expect(listed[0]?.reason).toMatch(/^(MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE): /);
    expect(listed[0]?.bytes).toBeGreaterThan(2 * LIMIT);
    expect((await run('outbox', 'set-aside', 'list', '--service', 'control')).json()).toEqual([]);
    expect(await delivered(event.event_id)).toHaveLength(0);

    // An id that is not waiting changes nothing.
    const unknown = await run(
      'outbox',
      'set-aside',
      'redrive',
      '--service',
      'data',
      '--id',
      String((listed[0]?.id ?? 0) + 1000),
    );
    expect(unknown.code).toBe(EXIT.nothingToDo);
    expect(unknown.err).toMatch(/nothing to redrive/);

    await limitTo(1024 * 1024);
    const redriven = await run('outbox', 'set-aside', 'redrive', '--service', 'data', '--id', String(listed[0]?.id));
    expect(redriven.code, redriven.err).toBe(EXIT.ok);
    expect(redriven.json()).toEqual({ service: 'data', redriven: 1 });
    await s.until('the redriven event delivered', async () =>
      (await delivered(event.event_id)).length > 0 ? true : undefined,
    );
    const records = await delivered(event.event_id);
    expect(records).toHaveLength(1);
    expect(String(records[0]?.value)).toContain('p'.repeat(2 * LIMIT));
    expect((await setAsideRows()).map((r) => [r.event_id, r.redriven_at !== null])).toEqual([[event.event_id, true]]);
    expect((await run('outbox', 'set-aside', 'list', '--service', 'data')).json()).toEqual([]);
    const again = await run('outbox', 'set-aside', 'redrive', '--service', 'data');
    expect(again.code).toBe(EXIT.nothingToDo);
    expect(again.err).toMatch(/no set-aside event waiting/);

    const audit = (await outboxAudit(s.data.app.pg)).filter((a) => a.action === 'admin.outbox.redrive');
    expect(audit.map((a) => [a.detail.redriven, a.result])).toEqual([
      [0, 'unchanged'],
      [0, 'unchanged'],
      [1, 'updated'],
      [0, 'unchanged'],
    ]);
  }, 120_000);

  it('refuses bad input: a usage exit from the CLI, a problem naming the field from the service', async () => {
    const cases: [string[], number, RegExp][] = [
      [['outbox', 'set-aside', 'list'], EXIT.usage, /--service/],
      [['outbox', 'set-aside', 'list', '--service', 'billing'], EXIT.usage, /billing/],
      [['outbox', 'set-aside', 'redrive', '--service', 'data', '--id', 'x'], EXIT.usage, /whole number/],
      [['outbox', 'set-aside', 'redrive', '--service', 'data', '--id', '0'], EXIT.usage, /whole number/],
      [['outbox', 'set-aside', 'list', '--service', 'intelligence'], EXIT.failure, /intelligence did not answer/],
    ];
    for (const [args, code, message] of cases) {
      const res = await run(...args);
      expect(res.code, `${args.join(' ')}: ${res.err}`).toBe(code);
      expect(res.err).toMatch(message);
    }

    for (const [body, field] of [
      [{ ids: [] }, /ids/],
      [{ ids: ['one'] }, /ids/],
      [{ ids: [0] }, /ids/],
      [{ all: true }, /all|additional/],
    ] as const) {
      const problem = expectProblem(await s.dataCall('POST', '/v1/admin/outbox/set-aside/redrive', { body }), 400);
      expect(JSON.stringify(problem), JSON.stringify(body)).toMatch(field);
    }
    expectProblem(await s.dataCall('GET', '/v1/admin/outbox/set-aside?limit=0'), 400);
    expectProblem(await s.dataCall('GET', '/v1/admin/outbox/set-aside?limit=501'), 400);

    await s.world('sa', { objectTypes: {} });
    const owner = await s.user('olga', 'sa', 'owner');
    expectProblem(await s.dataCall('GET', '/v1/admin/outbox/set-aside', { token: owner }), 403);
    expectProblem(await s.dataCall('POST', '/v1/admin/outbox/set-aside/redrive', { token: owner, body: {} }), 403);
  }, 120_000);
});
