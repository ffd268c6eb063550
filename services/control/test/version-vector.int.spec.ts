import { type EventEnvelope, encodeEvent, newEvent, physicalTopic } from '@onto/shared';
import { buildTestService, committedToEnd, type TestService, testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, assert, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, expectProblem, type Stack } from '../../data/test/stack.js';
import * as intelligence from '../../intelligence/src/app.js';
import { ConfigSchema as IntelligenceConfig } from '../../intelligence/src/config.js';
import { trimPositionSamples } from '../src/worlds/consistency.js';

/**
 * The version vector (docs/adr/0025) on the real stack: control learns data's and intelligence's
 * positions from their announcements on Kafka. intelligence starts late, so it lags by everything
 * until it runs; one partition per topic keeps the hand-made announcements in order.
 */

const W = 'vector';
const str = { type: 'string', required: true };
const objectTypes = {
  Order: { displayName: 'Order', primaryKey: 'id', properties: { id: str } },
  Customer: { displayName: 'Customer', primaryKey: 'id', properties: { id: str } },
  Item: { displayName: 'Item', primaryKey: 'id', properties: { id: str } },
};
const ANNOUNCE = { POSITION_ANNOUNCE_MS: '200' };

interface Vector {
  world: string;
  control: { schemaVersion: number; dataSeq: number | null };
  data: { schemaVersion: number; dataSeq: number; reportedAt: string | null };
  intelligence: { schemaVersion: number; dataSeq: number; reportedAt: string | null };
  spread: number;
  dataBehind: number;
  consistent: boolean;
  lagging: string | null;
  findings: unknown[];
}

describe('the version vector of a world', () => {
  let s: Stack;
  let intel: TestService<unknown> | undefined;
  let schemaVersion = 0;
  let lastWrite = 0;

  const vector = async (world = W): Promise<Vector> => {
    const res = await s.controlCall('GET', `/v1/worlds/${world}/consistency`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json();
  };
  const spreadMetric = async () => {
    const text = (await s.control.app.inject({ method: 'GET', url: '/metrics' })).body;
    const line = text
      .split('\n')
      .find((l) => l.startsWith('onto_version_vector_spread{') && l.includes(`world="${W}"`));
    return line === undefined ? undefined : Number(line.split(' ').at(-1));
  };

  beforeAll(async () => {
    s = await dataStack({ partitions: 1, dataEnv: ANNOUNCE });
    schemaVersion = await s.world(W, { objectTypes });
    for (const id of ['o1', 'o2', 'o3']) {
      const res = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/${id}`, { body: { properties: { id } } });
      expect(res.statusCode, res.body).toBe(201);
      lastWrite = Number(String(res.headers['x-consistency-token']).replace('data=', ''));
    }
  }, 120_000);

  afterAll(async () => {
    await intel?.close();
    await s?.close();
  });

  it('names intelligence as the laggard while it does not run, and is consistent once it has caught up', async () => {
    expect(schemaVersion).toBe(3);
    const lagging = await s.until('data to announce its position', async () => {
      const v = await vector();
      return v.data.dataSeq === lastWrite && v.data.schemaVersion === schemaVersion ? v : undefined;
    });
    expect(lagging).toMatchObject({
      world: W,
      control: { schemaVersion, dataSeq: null },
      intelligence: { schemaVersion: 0, dataSeq: 0, reportedAt: null },
      spread: 3,
      dataBehind: lastWrite,
      consistent: false,
      lagging: 'intelligence',
      findings: [],
    });
    expect(await spreadMetric()).toBe(3);

    intel = (await buildTestService(
      { schema: IntelligenceConfig, app: intelligence.default, migrations: intelligence.migrations } as never,
      { ONTO_TOPIC_PREFIX: s.prefix, ...ANNOUNCE },
    )) as TestService<unknown>;
    const caughtUp = await s.until(
      'intelligence to catch up',
      async () => {
        const v = await vector();
        return v.consistent ? v : undefined;
      },
      60_000,
    );
    expect(caughtUp).toMatchObject({
      control: { schemaVersion },
      data: { schemaVersion, dataSeq: lastWrite },
      intelligence: { schemaVersion, dataSeq: lastWrite },
      spread: 0,
      dataBehind: 0,
      lagging: null,
    });
    expect(await spreadMetric()).toBe(0);
  }, 90_000);

  it('is not moved back by a replayed or an older announcement', async () => {
    const before = await vector();
    expect(before.consistent).toBe(true);
    const broker = testBroker(testEndpoints().kafkaBrokers);
    const [storage, intelligenceTopic] = [
      physicalTopic(s.prefix, 'onto.storage'),
      physicalTopic(s.prefix, 'onto.intelligence'),
    ];
    // The announcements intelligence really sent, to replay them as they were.
    const sent = (
      await s.records('onto.intelligence', (seen) => seen.some((r) => r.event.type === 'intelligence.position'))
    )
      .filter((r) => r.event.type === 'intelligence.position')
      .map(({ record: { value } }) => {
        assert.isNotNull(value, 'an intelligence.position record has a value');
        return value;
      });
    const older = (
      type: 'storage.position' | 'storage.schema.updated' | 'intelligence.position',
      payload: object,
    ): EventEnvelope =>
      newEvent({
        type,
        worldId: W,
        key: W,
        version: 1,
        producer: type.startsWith('storage.') ? 'data' : 'intelligence',
        producerSeq: 1,
        payload: payload as never,
      });
    const producer = await broker.producer();
    try {
      await producer.send([
        {
          topic: storage,
          messages: [
            older('storage.position', { seq: 1 }),
            older('storage.schema.updated', { world: W, version: 1, previousVersion: 0, indexes: [] }),
          ].map((e) => ({ key: W, value: encodeEvent(e) })),
        },
        {
          topic: intelligenceTopic,
          messages: [
            ...sent.map((value) => ({ key: W, value })),
            { key: W, value: encodeEvent(older('intelligence.position', { schemaVersion: 1, dataSeq: 1 })) },
          ],
        },
      ]);
    } finally {
      await producer.disconnect();
    }
    for (const topic of [storage, intelligenceTopic]) {
      await committedToEnd(broker, `${s.prefix}control-worlds`, topic, { timeoutMs: 30_000 });
    }
    const after = await vector();
    expect({ ...after, control: { ...after.control, reportedAt: null } }).toEqual({
      ...before,
      control: { ...before.control, reportedAt: null },
    });
  }, 60_000);

  it('keeps its history: recorded from the announcements, each value held until the next, the window carrying the vector in, old samples trimmed', async () => {
    type Point = {
      at: string;
      controlSchemaVersion: number;
      data: { schemaVersion: number; dataSeq: number };
      intelligence: { schemaVersion: number; dataSeq: number };
      spread: number;
      dataBehind: number;
    };
    const history = async (minutes?: number): Promise<Point[]> => {
      const res = await s.controlCall(
        'GET',
        `/v1/worlds/${W}/consistency/history${minutes === undefined ? '' : `?minutes=${minutes}`}`,
      );
      expect(res.statusCode, res.body).toBe(200);
      return res.json().points;
    };
    // What control recorded from the real announcements: both services, ending with the vector now.
    const recorded = await s.control.app.pg.query<{ service: string }>(
      'SELECT DISTINCT service FROM world_position_samples WHERE world_id = $1 ORDER BY 1',
      [W],
    );
    expect(recorded.rows.map((r) => r.service)).toEqual(['data', 'intelligence']);
    const points = await history();
    expect(points.at(-1)).toMatchObject({
      controlSchemaVersion: schemaVersion,
      data: { schemaVersion, dataSeq: lastWrite },
      intelligence: { schemaVersion, dataSeq: lastWrite },
      spread: 0,
      dataBehind: 0,
    });
    const times = points.map((p) => Date.parse(p.at));
    expect(times).toEqual([...times].sort((a, b) => a - b));
    expect(new Set(times).size).toBe(times.length);

    // Samples from before: the window opens with the vector as it stood then, and each service's
    // value holds until its next sample (a lag shorter than a 10 s bucket is not seen: the
    // bucket's newest value wins).
    await s.control.app.pg.query(
      `INSERT INTO world_position_samples (world_id, service, at, schema_version, data_seq) VALUES
         ($1, 'data', now() - interval '3 hours', 1, 1), ($1, 'data', now() - interval '50 minutes', 2, 2),
         ($1, 'intelligence', now() - interval '40 minutes', 2, 1)`,
      [W],
    );
    const hour = await history(60);
    expect(Date.now() - Date.parse(hour[0]?.at ?? '')).toBeGreaterThanOrEqual(60 * 60_000 - 5_000);
    expect(hour[0]).toMatchObject({ data: { schemaVersion: 1, dataSeq: 1 }, intelligence: { dataSeq: 0 } });
    // control's schema versions were all created minutes ago: none yet 50 minutes back
    expect(hour[1]).toMatchObject({ controlSchemaVersion: 0, data: { dataSeq: 2 }, dataBehind: 2, spread: 2 });
    expect(hour[2]).toMatchObject({ data: { dataSeq: 2 }, intelligence: { dataSeq: 1 }, dataBehind: 1, spread: 2 });
    expect((await history(240))[1]).toMatchObject({ data: { dataSeq: 1 } });
    // the shortest window still ends with the vector as it stands
    const quiet = await history(1);
    expect(quiet.at(-1)).toMatchObject({ data: { dataSeq: lastWrite }, intelligence: { dataSeq: lastWrite } });

    // Trimming keeps what is younger than the setting.
    expect(await trimPositionSamples(s.control.app.pg, 7200)).toBe(1);
    expect((await history(240))[1]).toMatchObject({ data: { dataSeq: 2 } });

    expectProblem(await s.controlCall('GET', `/v1/worlds/${W}/consistency/history?minutes=0`), 400);
    expectProblem(await s.controlCall('GET', '/v1/worlds/no-such-world/consistency/history'), 404);
  }, 30_000);

  it('answers 404 problem+json for a world control does not know, and 400 for a malformed id', async () => {
    const unknown = expectProblem(await s.controlCall('GET', '/v1/worlds/no-such-world/consistency'), 404);
    expect(unknown.detail).toContain('no-such-world');
    const malformed = expectProblem(await s.controlCall('GET', '/v1/worlds/Not_A_Slug/consistency'), 400);
    expect(JSON.stringify(malformed)).toContain('world');
  });
});
