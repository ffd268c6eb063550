import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from '../../intelligence/test/stack.js';

/**
 * World-level tags on the real stack (docs/adr/0029): control asks data and intelligence for their
 * positions over Kafka; the tag names {control, data, intelligence}; reads and forks at the tag
 * use its data commit.
 */

const W = 'tagged';
const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer' } },
};

interface Tag {
  status: 'PENDING' | 'COMPLETE';
  ref: { control: number; data?: number; intelligence?: number };
}

describe('a world-level tag', () => {
  let s: IntelligenceStack;
  let schemaVersion: number;

  const write = async (world: string, pk: string, amount: number) => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/Order/${pk}`, {
      body: { properties: { amount } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return Number(String(res.headers['x-consistency-token']).replace('data=', ''));
  };
  const complete = (world: string, name: string) =>
    s.until(`tag ${name} of ${world} COMPLETE`, async () => {
      const tag: Tag = (await s.controlCall('GET', `/v1/worlds/${world}/tags/${name}`)).json();
      return tag.status === 'COMPLETE' ? tag : undefined;
    });
  const amount = async (world: string, pk: string, at?: number) => {
    const res = await s.dataCall(
      'GET',
      `/v1/worlds/${world}/objects/Order/${pk}${at === undefined ? '' : `?at=${at}`}`,
    );
    expect(res.statusCode, res.body).toBe(200);
    return res.json().properties.amount as number;
  };

  beforeAll(async () => {
    s = await intelligenceStack({ partitions: 1 });
    await s.identityKnown();
    schemaVersion = await s.world(W, { objectTypes: { Order } });
  }, 120_000);
  afterAll(async () => {
    await s?.close();
  });

  it('names data’s commit and intelligence’s watermark, with every write acknowledged before it', async () => {
    await write(W, 'o-1', 1);
    const last = await write(W, 'o-2', 2);
    // intelligence has applied both writes: its watermark is the last one.
    const applied = await s.intelCall('GET', `/v1/worlds/${W}/watermarks`, {
      headers: { 'x-consistency-token': `data=${last}` },
    });
    expect(applied.json().dataSeq).toBe(last);

    const made = await s.controlCall('PUT', `/v1/worlds/${W}/tags/release-1`, { body: {} });
    expect(made.statusCode, made.body).toBe(201);
    expect(made.json()).toMatchObject({ name: 'release-1', status: 'PENDING', ref: { control: schemaVersion } });
    const tag = await complete(W, 'release-1');
    expect(tag.ref.control).toBe(schemaVersion);
    expect(tag.ref.data).toBeGreaterThanOrEqual(last);
    expect(tag.ref.intelligence).toBe(last);
    // Immutable: the same PUT again answers the same vector.
    const again = await s.controlCall('PUT', `/v1/worlds/${W}/tags/release-1`, { body: {} });
    expect(again.statusCode).toBe(200);
    expect(again.json().ref).toEqual(tag.ref);

    // Writes after the tag: reads at the tag's data commit, and a fork at the tag, see the world as tagged.
    await write(W, 'o-1', 10);
    await write(W, 'o-3', 3);
    expect(await amount(W, 'o-1')).toBe(10);
    expect(await amount(W, 'o-1', tag.ref.data)).toBe(1);
    expect((await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o-3?at=${tag.ref.data}`)).statusCode).toBe(404);
    // data and intelligence learnt the tag from its request: a read at its name is a read at its commit.
    const byName = await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o-1?at=release-1`);
    expect(byName.statusCode, byName.body).toBe(200);
    expect(byName.json()).toEqual(
      (await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o-1?at=${tag.ref.data}`)).json(),
    );
    const inIntelligence = await s.intelCall('GET', `/v1/worlds/${W}/objects/Order/o-1?at=release-1`);
    expect(inIntelligence.statusCode, inIntelligence.body).toBe(200);
    expect(inIntelligence.json()).toMatchObject({ version: 1, properties: { amount: 1 } });
    expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Order/o-1?at=release-2`), 404);

    const fork = await s.controlCall('POST', '/v1/worlds', {
      body: { id: 'from-release', from: { world: W, ref: 'release-1' } },
    });
    expect(fork.statusCode, fork.body).toBe(202);
    const ready = await s.until('from-release READY', async () => {
      const res = (await s.controlCall('GET', '/v1/worlds/from-release')).json();
      if (res.status === 'FAILED') throw new Error(`fork failed: ${JSON.stringify(res.failure)}`);
      return res.status === 'READY' ? res : undefined;
    });
    expect(ready.from).toMatchObject({ world: W, ref: 'release-1', commit: tag.ref.data, schemaVersion });
    expect(await amount('from-release', 'o-1')).toBe(1);
    expect(await amount('from-release', 'o-2')).toBe(2);
    expect((await s.dataCall('GET', '/v1/worlds/from-release/objects/Order/o-3')).statusCode).toBe(404);
  });

  it('tags a fork with its own positions, and a tag of the fork forks again', async () => {
    const before = await write('from-release', 'o-2', 20);
    const tag = (await s.controlCall('PUT', '/v1/worlds/from-release/tags/rc', { body: {} })).json() as Tag;
    expect(tag.status).toBe('PENDING');
    const done = await complete('from-release', 'rc');
    expect(done.ref.data).toBeGreaterThanOrEqual(before);
    await write('from-release', 'o-2', 21);
    expect(await amount('from-release', 'o-2', done.ref.data)).toBe(20);

    const created = await s.controlCall('POST', '/v1/worlds', {
      body: { id: 'from-rc', from: { world: 'from-release', ref: 'rc' } },
    });
    expect(created.statusCode, created.body).toBe(202);
    await s.until('from-rc READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/from-rc')).json().status === 'READY' ? true : undefined,
    );
    expect(await amount('from-rc', 'o-2')).toBe(20);
    expect(await amount('from-rc', 'o-1')).toBe(1);
  });
});
