import * as net from 'node:net';
import { createKafkaBroker } from '@onto/shared';
import { buildTestService, eventually, type TestService, testLogger } from '@onto/shared/testing';
import type { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as data from '../src/app.js';
import { ConfigSchema as DataConfig } from '../src/config.js';
import { SseClient, type SseEvent } from './sse-client.js';
import { dataStack, type Stack } from './stack.js';

// SSE on GET /v1/worlds/{w}/events (docs/adr/0059): two data instances on one database and one
// broker, each with its own reader of the live topics.
let s: Stack;
let second: TestService<unknown>;
let urls: [string, string];

const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, n: { type: 'integer' }, pad: { type: 'string' } },
};

const liveEnv = { LIVE_BUFFER_EVENTS: '200', LIVE_HEARTBEAT_MS: '300', LIVE_AUTH_CHECK_MS: '200' };

beforeAll(async () => {
  s = await dataStack({ partitions: 3, dataEnv: liveEnv });
  second = (await buildTestService({ schema: DataConfig, app: data.default, migrations: data.migrations } as never, {
    ...s.data.env,
    DATABASE_URL: s.data.databaseUrl,
    ...liveEnv,
  })) as TestService<unknown>;
  const a = await s.data.app.listen({ port: 0, host: '127.0.0.1' });
  const b = await second.app.listen({ port: 0, host: '127.0.0.1' });
  urls = [a, b];
  await s.world('live', { objectTypes: { Item } });
  await s.world('other', { objectTypes: { Item } });
  await s.world('relist', { objectTypes: { Item } });
  // Both readers have their partitions: a subscription answers 200.
  for (const url of urls) {
    await eventually('the live reader started', async () => {
      const c = new SseClient(`${url}/v1/worlds/live/events`, { authorization: `Bearer ${s.admin}` });
      const status = await c.opened();
      c.close();
      return status === 200;
    });
  }
}, 120_000);

afterAll(async () => {
  await second?.close();
  await s?.close();
}, 120_000);

const auth = (token = s.admin) => ({ authorization: `Bearer ${token}` });
const put = (world: string, id: string, n: number, pad = '') =>
  s.dataCall('PUT', `/v1/worlds/${world}/objects/Item/${id}`, { body: { properties: { n, pad } } });
const parse = (e: SseEvent) =>
  JSON.parse(e.data) as {
    id: string;
    type: string;
    subject: string;
    data: { world_id: string; version: number; payload: { pk: string; after: { n: number } | null } };
  };

/** Every object event a client holds, as `pk@version`, in arrival order. */
const seen = (c: SseClient) => c.events.filter((e) => e.event.startsWith('object.')).map((e) => parse(e));

function expectPerObjectOrder(events: ReturnType<typeof parse>[]) {
  const last = new Map<string, number>();
  for (const e of events) {
    const pk = e.data.payload.pk;
    expect(e.data.version, `${pk} out of order`).toBeGreaterThan(last.get(pk) ?? 0);
    last.set(pk, e.data.version);
  }
}

describe('live events (SSE)', () => {
  it('refuses bad subscriptions with problems naming the field', async () => {
    const bad = async (query: string, headers: Record<string, string> = {}) => {
      const res = await s.dataCall('GET', `/v1/worlds/live/events${query}`, { headers });
      return { status: res.statusCode, body: res.json(), type: res.headers['content-type'] };
    };
    const topic = await bad('?topics=objects,nope');
    expect(topic.status).toBe(400);
    expect(topic.type).toContain('application/problem+json');
    expect(topic.body.errors).toEqual([expect.objectContaining({ path: 'querystring/topics' })]);
    const type = await bad('?types=object.exploded');
    expect(type.body.errors).toEqual([expect.objectContaining({ path: 'querystring/types' })]);
    const mismatch = await bad('?topics=links&types=object.created');
    expect(mismatch.body.errors).toEqual([expect.objectContaining({ path: 'querystring/types' })]);
    const where = await bad('?where=n:between:1');
    expect(where.body.errors).toEqual([expect.objectContaining({ path: 'querystring/where' })]);
    const position = await bad('', { 'last-event-id': 'abc.1.2' });
    expect(position.status).toBe(400);
    expect(position.body.errors).toEqual([expect.objectContaining({ path: 'headers/last-event-id' })]);
    const unknown = await s.dataCall('GET', '/v1/worlds/nowhere/events');
    expect(unknown.statusCode).toBe(404);
    const anonymous = await s.data.app.inject({ method: 'GET', url: '/v1/worlds/live/events' });
    expect(anonymous.statusCode).toBe(401);
  });

  it('streams the world’s events with resumable ids, filtered, with heartbeats; a position of another world is refused', async () => {
    const all = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, auth());
    const big = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects&where=n:gte:10`, auth());
    // A browser's EventSource passes the token in the query.
    const browser = new SseClient(`${urls[1]}/v1/worlds/live/events?types=object.created&access_token=${s.admin}`, {});
    expect(await all.opened()).toBe(200);
    expect(await big.opened()).toBe(200);
    expect(await browser.opened()).toBe(200);
    for (const [i, n] of [1, 20, 5, 30].entries()) expect((await put('live', `f-${i}`, n)).statusCode).toBe(201);
    expect((await put('other', 'x', 99)).statusCode).toBe(201);
    expect((await put('live', 'f-0', 50)).statusCode).toBe(200);
    await eventually(
      'five events',
      async () => seen(all).length === 5 && seen(big).length === 3 && seen(browser).length === 4,
    );
    await eventually('a heartbeat', async () => all.comments >= 2);
    // Every event once; order holds per object (f-0's two versions), not across objects.
    const all5 = seen(all).map((e) => `${e.data.payload.pk}:${e.data.payload.after?.n}`);
    expect([...all5].sort()).toEqual(['f-0:1', 'f-0:50', 'f-1:20', 'f-2:5', 'f-3:30']);
    expect(all5.indexOf('f-0:1')).toBeLessThan(all5.indexOf('f-0:50'));
    // Objects on different partitions arrive in either order (the relay's loops send side by side).
    expect(
      seen(big)
        .map((e) => `${e.data.payload.pk}:${e.data.payload.after?.n}`)
        .sort(),
    ).toEqual(['f-0:50', 'f-1:20', 'f-3:30']);
    const f0 = all.events.find((e) => parse(e).subject?.endsWith('live/Item/f-0')) as SseEvent;
    expect(parse(f0)).toMatchObject({ type: 'object.created', subject: expect.stringContaining('live/Item/f-0') });
    expect(f0.event).toBe('object.created');
    all.close();
    big.close();
    browser.close();
    // The id of world live's subscription is no position of world other.
    const foreign = await s.dataCall('GET', '/v1/worlds/other/events?topics=objects', {
      headers: { 'last-event-id': all.events[0]?.id as string },
    });
    expect(foreign.statusCode).toBe(400);
    expect(foreign.json().errors[0].path).toBe('headers/last-event-id');
  });

  it('resumes on another instance after Last-Event-ID with no gap and no repeat', async () => {
    const got: ReturnType<typeof parse>[] = [];
    const writes = (from: number, to: number) =>
      Promise.all(
        Array.from({ length: to - from }, (_, k) =>
          put('live', `r-${(from + k) % 7}`, from + k).then((r) => r.statusCode),
        ),
      );
    const killed = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, auth());
    expect(await killed.opened()).toBe(200);
    const done: Promise<unknown>[] = [];
    for (let k = 0; k < 60; k += 10) done.push(writes(k, k + 10));
    await Promise.all(done);
    await eventually('some events', async () => seen(killed).length >= 20);
    killed.close();
    const last = killed.events.at(-1) as SseEvent;
    got.push(...seen(killed));
    await writes(60, 90);
    const resumed = new SseClient(`${urls[1]}/v1/worlds/live/events?topics=objects`, {
      ...auth(),
      'last-event-id': last.id as string,
    });
    expect(await resumed.opened()).toBe(200);
    await eventually('every event', async () => got.length + seen(resumed).length >= 90, { timeoutMs: 20_000 });
    await new Promise((r) => setTimeout(r, 500));
    resumed.close();
    got.push(...seen(resumed));
    const ids = got.map((e) => e.id);
    expect(new Set(ids).size, 'an event repeated').toBe(ids.length);
    expect(got.map((e) => e.data.payload.after?.n).sort((a, b) => (a ?? 0) - (b ?? 0))).toEqual(
      Array.from({ length: 90 }, (_, i) => i),
    );
    expectPerObjectOrder(got);
  }, 60_000);

  it('keeps the other subscribers going past one that never reads, which gets overflow', async () => {
    const readers = [0, 1].map((i) => new SseClient(`${urls[i]}/v1/worlds/live/events?topics=objects`, auth()));
    for (const r of readers) expect(await r.opened()).toBe(200);
    // The stuck one sends its request and never reads a byte.
    const stuck = net.connect(Number(new URL(urls[0]).port), '127.0.0.1');
    stuck.pause();
    stuck.write(
      `GET /v1/worlds/live/events?topics=objects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.admin}\r\n\r\n`,
    );
    await new Promise((r) => setTimeout(r, 300));
    const pad = 'x'.repeat(900);
    const total = 6000;
    for (let k = 0; k < total; k += 2000) {
      const body = Array.from({ length: 2000 }, (_, j) => ({ properties: { id: `o-${k + j}`, n: k + j, pad } }));
      const res = await s.dataCall('POST', '/v1/worlds/live/bulk/Item', { body });
      expect(res.statusCode, res.body).toBeLessThan(300);
    }
    // Once it has overflowed, it reads (a client that never does is cut off 10 s later): what was
    // buffered, then overflow with its last position, then the end.
    await eventually(
      'the stuck one overflowed',
      async () => {
        const metrics = await s.data.app.inject({ method: 'GET', url: '/metrics' });
        return /onto_live_overflows_total(\{[^}]*\})? [1-9]/.test(metrics.body);
      },
      { timeoutMs: 60_000 },
    );
    let text = '';
    stuck.setEncoding('utf8');
    stuck.on('data', (c: string) => {
      text += c;
    });
    const closed = new Promise((r) => stuck.on('close', r));
    stuck.resume();
    await closed;
    await eventually(
      'both readers got everything',
      async () => {
        return readers.every((r) => seen(r).length >= total);
      },
      {
        timeoutMs: 60_000,
      },
    );
    for (const r of readers) {
      expect(seen(r).length).toBe(total);
      expect(r.events.some((e) => e.event === 'overflow')).toBe(false);
      r.close();
    }
    expect(text).toContain('event: overflow');
    const overflow = JSON.parse(/event: overflow\ndata: (.*)\n/.exec(text)?.[1] ?? '{}');
    const ids = [...text.matchAll(/^id: (.*)$/gm)].map((m) => m[1]);
    expect(overflow.lastEventId).toBe(ids.at(-1));
    expect(ids.length).toBeLessThan(total);
  }, 120_000);

  it('gives each event once when a relay sends its record again (a copy on the same partition)', async () => {
    const first = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, auth());
    expect(await first.opened()).toBe(200);
    expect((await put('live', 'dup-1', 1)).statusCode).toBe(201);
    await eventually('the event', async () => seen(first).length === 1);
    const original = JSON.parse((first.events[0] as SseEvent).data) as Record<string, unknown> & { data: unknown };
    // The same record again, as a relay resending a batch would put it: same key, value and headers.
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    for (const name of ['specversion', 'id', 'type', 'source', 'time', 'subject', 'dataschema']) {
      if (typeof original[name] === 'string') headers[`ce_${name}`] = original[name] as string;
    }
    headers['onto-event-id'] = original.id as string;
    const broker = createKafkaBroker({
      brokers: [s.data.env.KAFKA_BROKERS as string],
      clientId: 'live-duplicate',
      logger: testLogger,
    });
    const producer = await broker.producer();
    await producer.send([
      {
        topic: `${s.prefix}onto.changes.objects`,
        messages: [{ key: original.subject as string, value: JSON.stringify(original.data), headers }],
      },
    ]);
    await producer.disconnect();
    // An event after the copy on the same object (the same partition): once it is here, the copy was read.
    expect((await put('live', 'dup-1', 2)).statusCode).toBe(200);
    await eventually('the next event', async () => seen(first).length >= 2);
    // A subscriber resuming from before the copy, on the other instance, skips it too.
    const resumed = new SseClient(`${urls[1]}/v1/worlds/live/events?topics=objects`, {
      ...auth(),
      'last-event-id': first.events[0]?.id as string,
    });
    expect(await resumed.opened()).toBe(200);
    await eventually('the next event, resumed', async () => seen(resumed).length >= 1);
    await new Promise((r) => setTimeout(r, 500));
    expect(seen(first).map((e) => `${e.data.payload.pk}@${e.data.version}`)).toEqual(['dup-1@1', 'dup-1@2']);
    expect(seen(resumed).map((e) => `${e.data.payload.pk}@${e.data.version}`)).toEqual(['dup-1@2']);
    const metrics = await s.data.app.inject({ method: 'GET', url: '/metrics' });
    expect(metrics.body).toMatch(/onto_live_duplicates_skipped_total(\{[^}]*\})? [1-9]/);
    first.close();
    resumed.close();
  });

  /** When data first refuses this token (its replica learnt of the change: 401 for a revoked or outdated token). */
  const learnt = async (token: string) => {
    await eventually(
      'data learning of it',
      async () =>
        [401, 403].includes((await s.dataCall('GET', '/v1/worlds/live/schema-version', { token })).statusCode),
      { intervalMs: 10 },
    );
    return Date.now();
  };

  it('closes the stream within a second of the token being revoked, and when the role is lost', async () => {
    const token = await s.user('watcher', 'live', 'viewer');
    const stream = new SseClient(`${urls[0]}/v1/worlds/live/events`, auth(token));
    expect(await stream.opened()).toBe(200);
    const revoked = await s.control.app.inject({ method: 'DELETE', url: '/v1/auth/token', headers: auth(token) });
    expect(revoked.statusCode).toBeLessThan(300);
    // Within a second of data learning of it (the revocation's trip through onto.identity to data's
    // replica is the identity replica's, bounded by IDENTITY_MAX_LAG_MS, and measured here too).
    const at = Date.now();
    const known = await learnt(token);
    await stream.ended;
    const after = (stream.endedAt as number) - known;
    console.log(`stream closed ${(stream.endedAt as number) - at} ms after the revocation answered`);
    expect(stream.events.at(-1)?.event).toBe('closed');
    expect(after, `closed ${after} ms after data refused the token`).toBeLessThanOrEqual(1000);

    const other = await s.user('leaver', 'live', 'viewer');
    const second = new SseClient(`${urls[1]}/v1/worlds/live/events`, auth(other));
    expect(await second.opened()).toBe(200);
    const removed = await s.controlCall('DELETE', '/v1/worlds/live/members/leaver');
    expect(removed.statusCode).toBeLessThan(300);
    const at2 = Date.now();
    await second.ended;
    expect((second.endedAt as number) - at2).toBeLessThanOrEqual(1000);
    expect(second.events.at(-1)?.event).toBe('closed');
  }, 30_000);

  it('a list answers the commit it read: subscribing from it, every later change comes once, none it holds, while writers run', async () => {
    const ids = Array.from({ length: 10 }, (_, i) => `r-${i}`);
    for (const id of ids) expect((await put('relist', id, 0)).statusCode).toBe(201);
    let stop = false;
    let writes = 0;
    const writer = (async () => {
      for (let n = 1; !stop; n++) {
        const statuses = await Promise.all(ids.map(async (id) => (await put('relist', id, n)).statusCode));
        expect(statuses.every((st) => st === 200)).toBe(true);
        writes += ids.length;
      }
    })();
    try {
      await eventually('writes under way', async () => writes >= 30);
      const list = await s.dataCall('GET', '/v1/worlds/relist/objects/Item?limit=4');
      expect(list.statusCode).toBe(200);
      const first = list.json() as { commit: number; next: string; objects: { pk: string; version: number }[] };
      expect(Number.isSafeInteger(first.commit)).toBe(true);
      // The later pages read the same commit, however the writers go on.
      const held = new Map(first.objects.map((o) => [o.pk, o.version]));
      for (let next: string | null = first.next; next !== null; ) {
        const page = await s.dataCall(
          'GET',
          `/v1/worlds/relist/objects/Item?limit=4&cursor=${encodeURIComponent(next)}`,
        );
        const body = page.json() as typeof first;
        expect(body.commit).toBe(first.commit);
        for (const o of body.objects) held.set(o.pk, o.version);
        next = body.next;
      }
      expect([...held.keys()].sort()).toEqual([...ids].sort());
      const listedAt = writes;
      await eventually('more writes after the list', async () => writes >= listedAt + 30);
      // On the other instance, a while after the list: from= replays what the ring holds past it.
      const sub = new SseClient(`${urls[1]}/v1/worlds/relist/events?topics=objects&from=${first.commit}`, auth());
      expect(await sub.opened()).toBe(200);
      await eventually('writes while subscribed', async () => writes >= listedAt + 60);
      stop = true;
      await writer;
      const final = (await s.dataCall('GET', '/v1/worlds/relist/objects/Item?limit=100')).json() as typeof first;
      const latest = new Map(final.objects.map((o) => [o.pk, o.version]));
      const streamed = (pk: string) =>
        seen(sub)
          .filter((e) => e.data.payload.pk === pk)
          .map((e) => e.data.version);
      await eventually('every change after the list', async () =>
        ids.every((id) => streamed(id).at(-1) === latest.get(id)),
      );
      // No gap, no repeat: per object, exactly the versions after the one the list held.
      for (const id of ids) {
        const from = held.get(id) as number;
        const to = latest.get(id) as number;
        expect(to).toBeGreaterThan(from);
        expect(streamed(id), id).toEqual(Array.from({ length: to - from }, (_, i) => from + 1 + i));
      }
      sub.close();
      // A list read at a ref answers that ref's commit.
      const at = await s.dataCall('GET', `/v1/worlds/relist/objects/Item?at=${first.commit}`);
      expect(at.json().commit).toBe(first.commit);
      expect(new Map((at.json() as typeof first).objects.map((o) => [o.pk, o.version]))).toEqual(held);
    } finally {
      stop = true;
      await writer.catch(() => {});
    }
  }, 90_000);

  it('answers 410 for a position older than what is kept', async () => {
    const small = (await buildTestService(
      { schema: DataConfig, app: data.default, migrations: data.migrations } as never,
      {
        ...s.data.env,
        DATABASE_URL: s.data.databaseUrl,
        LIVE_REPLAY_EVENTS: '100',
      },
    )) as TestService<unknown>;
    try {
      const url = await small.app.listen({ port: 0, host: '127.0.0.1' });
      await eventually('started', async () => {
        const probe = new SseClient(`${url}/v1/worlds/live/events?topics=objects`, auth());
        const status = await probe.opened();
        probe.close();
        return status === 200;
      });
      const c = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, auth());
      expect(await c.opened()).toBe(200);
      expect((await put('live', 'g-0', 1)).statusCode).toBe(201);
      await eventually('one', async () => seen(c).length === 1);
      c.close();
      const old = c.events[0]?.id as string;
      const body = Array.from({ length: 300 }, (_, j) => ({ properties: { id: `g-${j + 1}`, n: j } }));
      expect((await s.dataCall('POST', '/v1/worlds/live/bulk/Item', { body })).statusCode).toBeLessThan(300);
      const gone = await eventually('the small ring moved on', async () => {
        const probe = new SseClient(`${url}/v1/worlds/live/events?topics=objects`, { ...auth(), 'last-event-id': old });
        const status = await probe.opened();
        if (status === 200) probe.close();
        else await probe.ended;
        return status === 410 ? probe : undefined;
      });
      expect(JSON.parse(gone.body)).toMatchObject({ status: 410, field: 'headers/last-event-id' });
      expect(JSON.parse(gone.body).detail).toContain('from=');
      // As the 410 says: list again, then subscribe from the commit the list read, on the same
      // instance: only what changed after the list comes (none of the 300 it already holds).
      const listed = await s.dataCall('GET', '/v1/worlds/live/objects/Item?limit=1000');
      expect(listed.statusCode).toBe(200);
      const { commit, objects } = listed.json() as { commit: number; objects: { pk: string; version: number }[] };
      expect(objects.filter((o) => o.pk.startsWith('g-'))).toHaveLength(301);
      const after = new SseClient(`${url}/v1/worlds/live/events?topics=objects&from=${commit}`, auth());
      expect(await after.opened()).toBe(200);
      expect((await put('live', 'g-7', 1000)).statusCode).toBe(200);
      await eventually('the change after the list', async () => seen(after).length === 1);
      expect(seen(after).map((e) => `${e.data.payload.pk}@${e.data.version}`)).toEqual([
        `g-7@${(objects.find((o) => o.pk === 'g-7')?.version ?? 0) + 1}`,
      ]);
      after.close();
      // The same position still resumes where the ring holds it.
      const resumed = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, {
        ...auth(),
        'last-event-id': old,
      });
      expect(await resumed.opened()).toBe(200);
      await eventually('the 300 events after it', async () => seen(resumed).length >= 300);
      resumed.close();
    } finally {
      await small.close();
    }
  }, 60_000);

  it('bounds its ring by bytes as well as by count: large events evict the oldest first, and an evicted position is 410', async () => {
    const bytes = 1024 * 1024;
    const small = (await buildTestService(
      { schema: DataConfig, app: data.default, migrations: data.migrations } as never,
      { ...s.data.env, DATABASE_URL: s.data.databaseUrl, LIVE_REPLAY_BYTES: String(bytes) },
    )) as TestService<unknown>;
    const hub = (small.app as unknown as { liveHub: { first: number; end: number } }).liveHub;
    const gauge = async (name: string) =>
      (await (small.app as unknown as { metrics: Registry }).metrics.getSingleMetric(name)?.get())?.values[0]?.value ??
      -1;
    try {
      const url = await small.app.listen({ port: 0, host: '127.0.0.1' });
      await eventually('started', async () => {
        const probe = new SseClient(`${url}/v1/worlds/live/events?topics=objects`, auth());
        const status = await probe.opened();
        probe.close();
        return status === 200;
      });
      // Its position, taken on the instance with the default bounds (the new one is still reading back).
      const c = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, auth());
      expect(await c.opened()).toBe(200);
      expect((await put('live', 'b-0', 1)).statusCode).toBe(201);
      await eventually('one', async () => seen(c).length === 1);
      c.close();
      const old = c.events[0]?.id as string;
      // 200 events of ~8 KB: 1.6 MB, past the 1 MB bound; far below the count bound (200,000).
      const pad = 'p'.repeat(8000);
      const body = Array.from({ length: 200 }, (_, j) => ({ properties: { id: `b-${j + 1}`, n: j, pad } }));
      expect((await s.dataCall('POST', '/v1/worlds/live/bulk/Item', { body })).statusCode).toBeLessThan(300);
      const gone = await eventually('the byte bound evicted b-0', async () => {
        const probe = new SseClient(`${url}/v1/worlds/live/events?topics=objects`, { ...auth(), 'last-event-id': old });
        const status = await probe.opened();
        if (status === 200) probe.close();
        else await probe.ended;
        return status === 410 ? probe : undefined;
      });
      expect(JSON.parse(gone.body)).toMatchObject({ status: 410, field: 'headers/last-event-id' });
      // Within the byte bound, and it is the bytes that evicted: far fewer records than the count bound allows.
      const kept = hub.end - hub.first;
      expect(await gauge('onto_live_replay_bytes')).toBeLessThanOrEqual(bytes);
      expect(await gauge('onto_live_replay_bytes')).toBeGreaterThan(bytes / 2);
      expect(kept).toBeGreaterThan(0);
      expect(kept).toBeLessThan(130);
      // The instance with the default bound (32 MiB) still resumes the same position, with every event after it.
      const resumed = new SseClient(`${urls[0]}/v1/worlds/live/events?topics=objects`, {
        ...auth(),
        'last-event-id': old,
      });
      expect(await resumed.opened()).toBe(200);
      await eventually('the 200 events after it', async () => seen(resumed).length >= 200);
      expect(seen(resumed).filter((e) => e.data.payload.pk.startsWith('b-')).length).toBe(200);
      resumed.close();
    } finally {
      await small.close();
    }
  }, 60_000);
});
