import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PositionAnnouncer } from '../src/positions/announcer.js';
import { dataStack, type Stack } from './stack.js';

const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, qty: { type: 'integer' } },
};
const ndjson = (ids: string[]) => ids.map((id, i) => JSON.stringify({ properties: { id, qty: i } })).join('\n');

/**
 * data's position announcements (docs/adr/0025), driven tick by tick: the service's own announcer
 * is slowed out of the way, so that each tick here sees exactly the writes made before it.
 */
describe("data's position per world", () => {
  let s: Stack;
  let announcer: PositionAnnouncer;
  const newest = async (world: string) =>
    Number(
      (
        await s.data.app.pg.query<{ seq: string }>(
          'SELECT max(seq)::text AS seq FROM (SELECT seq FROM object_heads WHERE world_id = $1 UNION ALL SELECT seq FROM link_heads WHERE world_id = $1) h',
          [world],
        )
      ).rows[0]?.seq,
    );
  const announced = async () =>
    (
      await s.data.app.pg.query<{ world: string; seq: number }>(
        `SELECT body::jsonb->>'world_id' AS world, (body::jsonb->'payload'->>'seq')::int AS seq
           FROM outbox WHERE body LIKE '%"type":"storage.position"%' ORDER BY id`,
      )
    ).rows;

  beforeAll(async () => {
    s = await dataStack({ dataEnv: { POSITION_ANNOUNCE_MS: '600000' } });
    await s.world('pos-a', { objectTypes: { Item } });
    await s.world('pos-b', { objectTypes: { Item } });
    announcer = new PositionAnnouncer(s.data.app.pg, s.prefix);
  }, 120_000);
  afterAll(async () => s?.close());

  it("announces each world's newest write, from single writes and from bulk bundles alike", async () => {
    expect(await announcer.tick()).toEqual(new Map());
    const bulk = await s.dataCall('POST', '/v1/worlds/pos-a/bulk/Item', {
      body: ndjson(Array.from({ length: 2000 }, (_, i) => `b${i}`)),
      headers: { 'content-type': 'application/x-ndjson' },
    });
    expect(bulk.statusCode, bulk.body).toBe(200);
    for (const id of ['s1', 's2']) {
      const res = await s.dataCall('PUT', `/v1/worlds/pos-b/objects/Item/${id}`, { body: { properties: { id } } });
      expect(res.statusCode, res.body).toBe(201);
    }
    expect(await announcer.tick()).toEqual(
      new Map([
        ['pos-a', await newest('pos-a')],
        ['pos-b', await newest('pos-b')],
      ]),
    );

    // A delete in b, a bulk write (one bundle) after it in a: both move on, each on its own.
    expect((await s.dataCall('DELETE', '/v1/worlds/pos-b/objects/Item/s1')).statusCode).toBe(204);
    const again = await s.dataCall('POST', '/v1/worlds/pos-a/bulk/Item', {
      body: ndjson(['c1', 'c2', 'c3']),
      headers: { 'content-type': 'application/x-ndjson' },
    });
    expect(again.statusCode, again.body).toBe(200);
    expect(await announcer.tick()).toEqual(
      new Map([
        ['pos-a', await newest('pos-a')],
        ['pos-b', await newest('pos-b')],
      ]),
    );

    // Nothing written: the overlap re-reads the last writes and announces nothing new, then idles.
    expect(await announcer.tick()).toEqual(new Map());
    expect(await announcer.tick()).toEqual(new Map());
    const events = await announced();
    expect(events).toHaveLength(4);
    expect(events.slice(2)).toEqual(
      expect.arrayContaining([
        { world: 'pos-a', seq: await newest('pos-a') },
        { world: 'pos-b', seq: await newest('pos-b') },
      ]),
    );
  }, 120_000);
});
