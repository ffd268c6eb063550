import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, expectProblem, type Stack } from './stack.js';

/**
 * `?at=<tag>` on every read of data (issue 35, docs/adr/0046): data learns a world's tags from the
 * `world.tag.requested` it already answers (the commit it cut for the tag), never from control
 * over HTTP, and a read at a tag answers exactly what a read at the tag's commit answers.
 */

const W = 'tagrefs';
const Machine = {
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    load: { type: 'integer' },
    temperature: { type: { type: 'series', value: 'double' } },
  },
};
const Site = { displayName: 'Site', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const linkTypes = { hosts: { from: 'Site', to: 'Machine', cardinality: 'ONE_TO_MANY' } };

describe('reads at a tag in data', () => {
  let s: Stack;

  beforeAll(async () => {
    s = await dataStack({ partitions: 1 });
    await s.world(W, { objectTypes: { Machine, Site }, linkTypes });
  }, 120_000);
  afterAll(async () => s?.close());

  const ok = async (method: 'PUT' | 'POST' | 'DELETE', url: string, body?: unknown) => {
    const res = await s.dataCall(method, url, body === undefined ? {} : { body: body as Record<string, unknown> });
    expect(res.statusCode, res.body).toBeLessThan(300);
    return res;
  };
  const machine = (pk: string, load: number) =>
    ok('PUT', `/v1/worlds/${W}/objects/Machine/${pk}`, { properties: { id: pk, load } });
  const points = (pk: string, at: string, value: number) =>
    ok('POST', `/v1/worlds/${W}/series/Machine/${pk}/temperature`, { points: [{ time: at, value }] });
  /** Makes a tag and waits until data has positioned it (its vector has `data`); answers that commit. */
  const tag = async (name: string) => {
    const made = await s.controlCall('PUT', `/v1/worlds/${W}/tags/${name}`, { body: {} });
    expect(made.statusCode, made.body).toBe(201);
    const got = await s.until(`tag ${name} positioned by data`, async () => {
      const t = (await s.controlCall('GET', `/v1/worlds/${W}/tags/${name}`)).json();
      return t.ref?.data === undefined ? undefined : t;
    });
    return got.ref.data as number;
  };

  it('every read route answers ?at=<tag> as ?at=<its commit>, before and after later writes', async () => {
    await ok('PUT', `/v1/worlds/${W}/objects/Site/s1`, { properties: { id: 's1' } });
    await machine('m1', 1);
    await machine('m2', 2);
    await ok('PUT', `/v1/worlds/${W}/links/hosts/s1/m1`);
    await points('m1', '2026-01-01T00:00:00Z', 20);
    const v1 = await tag('v1');

    // After the tag: changes of every kind.
    await machine('m1', 10);
    await ok('DELETE', `/v1/worlds/${W}/objects/Machine/m2`);
    await machine('m3', 3);
    await ok('PUT', `/v1/worlds/${W}/links/hosts/s1/m3`);
    await ok('DELETE', `/v1/worlds/${W}/links/hosts/s1/m1`);
    await points('m1', '2026-01-01T00:01:00Z', 21);
    const v2 = await tag('v2');
    await machine('m1', 100);

    const reads = [
      'objects/Machine/m1',
      'objects/Machine/m2',
      'objects/Machine',
      'objects/Site/s1/links/hosts',
      'series/Machine/m1/temperature?from=2025-01-01T00:00:00Z&to=2027-01-01T00:00:00Z',
    ];
    const join = (path: string, at: string | number) =>
      `/v1/worlds/${W}/${path}${path.includes('?') ? '&' : '?'}at=${at}`;
    for (const [name, commit] of [
      ['v1', v1],
      ['v2', v2],
    ] as const) {
      for (const path of reads) {
        const byTag = await s.dataCall('GET', join(path, name));
        const byCommit = await s.dataCall('GET', join(path, commit));
        expect(byTag.statusCode, `${path} at ${name}: ${byTag.body}`).toBe(byCommit.statusCode);
        expect(byTag.json(), `${path} at ${name}`).toEqual(byCommit.json());
      }
      // The diff takes refs in from and to.
      const diffByTag = await s.dataCall('GET', `/v1/worlds/${W}/diff?from=${name}&to=v2`);
      const diffByCommit = await s.dataCall('GET', `/v1/worlds/${W}/diff?from=${commit}&to=${v2}`);
      expect(diffByTag.statusCode, diffByTag.body).toBe(200);
      expect(diffByTag.json()).toEqual(diffByCommit.json());
    }

    // What the test wrote: m1 had load 1 at v1 and 10 at v2; m2 was there at v1 only; s1 hosted m1 at v1, m3 at v2.
    const at = async (path: string, ref: string) => (await s.dataCall('GET', join(path, ref))).json();
    expect((await at('objects/Machine/m1', 'v1')).properties.load).toBe(1);
    expect((await at('objects/Machine/m1', 'v2')).properties.load).toBe(10);
    expect((await s.dataCall('GET', join('objects/Machine/m2', 'v2'))).statusCode).toBe(404);
    const hosted = async (ref: string) =>
      ((await at('objects/Site/s1/links/hosts', ref)).links as { pk?: string; to?: string; object?: { pk: string } }[])
        .map((l) => l.to ?? l.pk ?? l.object?.pk)
        .sort();
    expect(await hosted('v1')).toEqual(['m1']);
    expect(await hosted('v2')).toEqual(['m3']);
    const series = async (ref: string) =>
      ((await at(reads[4] as string, ref)).points as { value: number }[]).map((p) => p.value);
    expect(await series('v1')).toEqual([20]);
    expect(await series('v2')).toEqual([20, 21]);
  }, 120_000);

  it('a tag data has not positioned, another world’s tag and a name that is no ref are problems naming at', async () => {
    const missing = expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=nosuch`), 404);
    expect(missing.errors[0].path).toBe('querystring/at');
    expect(missing.detail).toContain('no tag nosuch');
    await s.world('other', { objectTypes: { Machine } });
    const foreign = expectProblem(await s.dataCall('GET', '/v1/worlds/other/objects/Machine/m1?at=v1'), 404);
    expect(foreign.errors[0].path).toBe('querystring/at');
    const bad = expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=no%20such`), 400);
    expect(bad.errors[0].path).toBe('querystring/at');
    const diff = expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/diff?from=nosuch`), 404);
    expect(diff.errors[0].path).toBe('querystring/from');
    // Nothing was written by the reads: the tag table holds the two tags of W only.
    const { rows } = await s.data.app.pg.query('SELECT world_id, name FROM world_tags ORDER BY name');
    expect(rows).toEqual([
      { world_id: W, name: 'v1' },
      { world_id: W, name: 'v2' },
    ]);
    // A tag deleted in control (world.tag.deleted) no longer resolves; made again, it names its new commit.
    expect((await s.controlCall('DELETE', `/v1/worlds/${W}/tags/v1`)).statusCode).toBe(204);
    await s.until('v1 forgotten by data', async () =>
      (await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=v1`)).statusCode === 404 ? true : undefined,
    );
    const gone = expectProblem(await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=v1`), 404);
    expect(gone.errors[0].path).toBe('querystring/at');
    const again = await tag('v1');
    const m1 = await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=v1`);
    expect(m1.json()).toEqual((await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1?at=${again}`)).json());
    expect(m1.json().properties.load).toBe(100);
  }, 60_000);
});
