import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, size: { type: 'integer' } },
};

describe('intelligence schema replica and consistency token', () => {
  let s: IntelligenceStack;
  let schemaVersion: number;

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '400' } });
    schemaVersion = await s.world('replica', { objectTypes: { Item } });
  }, 60_000);
  afterAll(async () => s?.close());

  it('replicates the world schema, object types and all', async () => {
    const i = s.intelligence;
    if (!i) throw new Error('no intelligence');
    const { version, document } = await i.app.schemaReplica.current(i.app.pg, 'replica');
    expect(version).toBe(schemaVersion);
    expect(Object.keys(document.objectTypes)).toEqual(['Item']);
    const res = await s.intelCall('GET', '/v1/worlds/replica/watermarks');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ world: 'replica', schemaVersion });
    expect(res.headers['x-consistency-token']).toMatch(/^data=\d+$/);
  });

  it('waits for a schema version named in the token, and answers once it is applied', async () => {
    const pending = s.intelCall('GET', '/v1/worlds/replica/watermarks', {
      headers: { 'x-consistency-token': `control=${schemaVersion + 1}` },
    });
    const changed = await s.controlCall('PUT', '/v1/worlds/replica/object-types/Other', {
      body: { displayName: 'Other', primaryKey: 'k', properties: { k: { type: 'string', required: true } } },
    });
    expect(changed.statusCode, changed.body).toBe(200);
    const res = await pending;
    // The bound is 400 ms here: either it caught up in time, or it says so with 503.
    if (res.statusCode === 503) {
      expect(res.headers['retry-after']).toBeDefined();
      await s.until('the new version applied', async () => {
        const again = await s.intelCall('GET', '/v1/worlds/replica/watermarks', {
          headers: { 'x-consistency-token': `control=${schemaVersion + 1}` },
        });
        return again.statusCode === 200 ? again : undefined;
      });
    } else {
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json().schemaVersion).toBe(schemaVersion + 1);
    }
  });

  it('answers 503 with Retry-After when data has not been applied up to the token in time', async () => {
    const started = Date.now();
    const res = await s.intelCall('GET', '/v1/worlds/replica/watermarks', {
      headers: { 'x-consistency-token': 'data=999999999' },
    });
    const problem = expectProblem(res, 503);
    expect(problem.detail).toMatch(/not yet 999999999/);
    expect(res.headers['retry-after']).toBe('1');
    expect(Date.now() - started).toBeGreaterThanOrEqual(390);
  });

  it('refuses a malformed token and an unknown world', async () => {
    const bad = expectProblem(
      await s.intelCall('GET', '/v1/worlds/replica/watermarks', { headers: { 'x-consistency-token': 'data=abc' } }),
      400,
    );
    expect(JSON.stringify(bad)).toMatch(/x-consistency-token/);
    expectProblem(await s.intelCall('GET', '/v1/worlds/Bad_World/watermarks'), 400);
    expectProblem(await s.intelCall('GET', '/v1/worlds/nowhere/watermarks'), 404);
  });
});
