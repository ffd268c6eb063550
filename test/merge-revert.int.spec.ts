import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';
import { type Conflict, Customer, MERGE_STACK, mergeCalls } from './merge-helpers.js';

/**
 * Reverts of merges (issue 32 item 4, docs/adr/0081): `POST …/merges/{id}/revert` is a merge of
 * the target into itself, its source the target before the merge and its base the target right
 * after it, planned and applied by the three services as any merge. Every check reads the
 * services' own APIs.
 */

const refers = { from: 'Customer', to: 'Customer', cardinality: 'MANY_TO_MANY' };

describe('reverting a merge', () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack(MERGE_STACK);
  }, 120_000);
  afterAll(async () => s?.close());

  const { put, patch, remove, get, fork, settled, merge: start } = mergeCalls(() => s);
  const merge = async (target: string, source: string) => {
    const m = await settled(target, await start(target, { source, strategy: 'SOURCE_WINS' }));
    expect(m.status, JSON.stringify(m)).toBe('MERGED');
    return m.id;
  };
  const revert = async (world: string, id: string, body?: Record<string, unknown>) => {
    const res = await s.controlCall('POST', `/v1/worlds/${world}/merges/${id}/revert`, body ? { body } : {});
    expect(res.statusCode, res.body).toBe(202);
    expect(res.headers.location).toBe(`/v1/worlds/${world}/merges/${res.json().id}`);
    return settled(world, res.json().id);
  };
  const verified = async (world: string, id: string) => {
    const started = await s.controlCall('POST', `/v1/admin/worlds/${world}/merges/${id}/verify`);
    expect(started.statusCode, started.body).toBe(202);
    return s.until<{ differences: number; services: { data: { checked: number }; intelligence: { checked: number } } }>(
      'merge-verify complete',
      async () => {
        const res = await s.controlCall('GET', `/v1/admin/worlds/${world}/merges/${id}/verify`);
        return res.statusCode === 200 && res.json().complete ? res.json() : undefined;
      },
    );
  };
  const refersOf = async (world: string, pk: string) => {
    const res = await s.dataCall('GET', `/v1/worlds/${world}/objects/Customer/${pk}/links/refers`);
    expect(res.statusCode, res.body).toBe(200);
    return (res.json().links as { pk: string }[]).map((l) => l.pk);
  };
  const derived = async (world: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/derived-properties`);
    expect(res.statusCode, res.body).toBe(200);
    return (res.json().derivedProperties as { name: string }[]).map((d) => d.name).sort();
  };

  it('without later changes: objects, schema and definitions are as before the merge; later writes elsewhere stay; merge-verify agrees', async () => {
    await s.world('rv1', { objectTypes: { Customer }, linkTypes: { refers } });
    await put('rv1', 'c1', { id: 'c1', name: 'one', tier: 'bronze', creditLimit: 100 });
    await put('rv1', 'c2', { id: 'c2', name: 'two', tier: 'bronze', creditLimit: 100 });
    await put('rv1', 'c3', { id: 'c3', name: 'three', tier: 'bronze', creditLimit: 100 });
    await fork('rv1-staging', 'rv1');
    const region = { ...Customer, properties: { ...Customer.properties, region: { type: 'string' } } };
    const schema = await s.controlCall('PUT', '/v1/worlds/rv1-staging/object-types/Customer', { body: region });
    expect(schema.statusCode, schema.body).toBe(200);
    await s.until('the new schema in data', async () => {
      const res = await s.dataCall('GET', '/v1/worlds/rv1-staging/schema-version');
      return res.statusCode === 200 && res.json().version >= schema.json().version ? true : undefined;
    });
    await patch('rv1-staging', 'c1', { tier: 'gold', region: 'north' });
    await put('rv1-staging', 'added', { id: 'added', name: 'new', tier: 'bronze', creditLimit: 1 });
    await remove('rv1-staging', 'c3');
    const linked = await s.dataCall('PUT', '/v1/worlds/rv1-staging/links/refers/c1/c2');
    expect(linked.statusCode, linked.body).toBeLessThan(300);
    const defined = await s.intelCall('PUT', '/v1/worlds/rv1-staging/derived-properties/tripled', {
      body: { objectType: 'Customer', expression: 'self.creditLimit * 3' },
    });
    expect(defined.statusCode, defined.body).toBeLessThan(300);

    const mergeId = await merge('rv1', 'rv1-staging');
    expect(await get('rv1', 'c1')).toMatchObject({ tier: 'gold', region: 'north' });
    expect(await derived('rv1')).toEqual(['tripled']);
    expect(await refersOf('rv1', 'c1')).toEqual(['c2']);
    // A later write of a key the merge did not touch: the revert leaves it alone.
    await patch('rv1', 'c2', { name: 'later' });

    const reverted = await revert('rv1', mergeId);
    expect(reverted.status, JSON.stringify(reverted)).toBe('MERGED');
    expect(reverted).toMatchObject({ source: 'rv1', target: 'rv1', reverts: mergeId, conflicts: [] });
    expect(await get('rv1', 'c1')).toEqual({ id: 'c1', name: 'one', tier: 'bronze', creditLimit: 100 });
    expect(await get('rv1', 'c2')).toEqual({ id: 'c2', name: 'later', tier: 'bronze', creditLimit: 100 });
    expect(await get('rv1', 'c3')).toEqual({ id: 'c3', name: 'three', tier: 'bronze', creditLimit: 100 });
    expect(await get('rv1', 'added')).toBeNull();
    const after = (await s.controlCall('GET', '/v1/worlds/rv1/schema')).json();
    expect(Object.keys(after.objectTypes.Customer.properties).sort()).toEqual(['creditLimit', 'id', 'name', 'tier']);
    expect(await derived('rv1')).toEqual([]);
    expect(await refersOf('rv1', 'c1')).toEqual([]);
    // The source world is not touched by either.
    expect(await get('rv1-staging', 'added')).not.toBeNull();

    const report = await verified('rv1', reverted.id);
    expect(report.differences, JSON.stringify(report)).toBe(0);
    expect(report.services.data.checked).toBe(4); // c1, c3, added and the link: what the merge wrote
    expect(report.services.intelligence.checked).toBe(1);

    // A revert is a merge like any other: reverting it brings the merge's changes back.
    const again = await revert('rv1', reverted.id);
    expect(again.status, JSON.stringify(again)).toBe('MERGED');
    expect(await get('rv1', 'c1')).toEqual({ id: 'c1', name: 'one', tier: 'gold', creditLimit: 100, region: 'north' });
    expect(await get('rv1', 'c2')).toEqual({ id: 'c2', name: 'later', tier: 'bronze', creditLimit: 100 });
    expect(await get('rv1', 'c3')).toBeNull();
    expect(await get('rv1', 'added')).toMatchObject({ name: 'new' });
    expect(await refersOf('rv1', 'c1')).toEqual(['c2']);
    expect(await derived('rv1')).toEqual(['tripled']);
    expect((await verified('rv1', again.id)).differences).toBe(0);
  }, 240_000);

  it('a later change of a property the merge changed is a conflict, resolved and applied the ordinary way', async () => {
    await s.world('rv2', { objectTypes: { Customer } });
    await put('rv2', 'c1', { id: 'c1', name: 'one', tier: 'bronze', creditLimit: 100 });
    await fork('rv2-staging', 'rv2');
    await patch('rv2-staging', 'c1', { tier: 'gold', creditLimit: 500 });
    const mergeId = await merge('rv2', 'rv2-staging');
    await patch('rv2', 'c1', { creditLimit: 900 }); // after the merge, over what it wrote

    const planned = await revert('rv2', mergeId);
    expect(planned.status, JSON.stringify(planned)).toBe('CONFLICTS');
    expect(planned.conflicts).toHaveLength(1);
    const [conflict] = planned.conflicts as [Conflict];
    expect(conflict).toMatchObject({
      type: 'MODIFY_MODIFY',
      entity: { kind: 'object', type: 'Customer', pk: 'c1', property: 'creditLimit' },
      base: 500,
      source: 100,
      target: 900,
    });
    // Nothing applied while it waits.
    expect(await get('rv2', 'c1')).toMatchObject({ tier: 'gold', creditLimit: 900 });
    // A merge that is not MERGED cannot be reverted: 409 naming its state, nothing started.
    const early = await s.controlCall('POST', `/v1/worlds/rv2/merges/${planned.id}/revert`);
    expectProblem(early, 409);
    expect(early.json().detail).toContain('CONFLICTS');

    const resolved = await s.controlCall('PUT', `/v1/worlds/rv2/merges/${planned.id}/conflicts/${conflict.id}`, {
      body: { take: 'target' },
    });
    expect(resolved.statusCode, resolved.body).toBe(200);
    expect((await s.controlCall('POST', `/v1/worlds/rv2/merges/${planned.id}/apply`)).statusCode).toBe(202);
    const done = await settled('rv2', planned.id);
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    expect(await get('rv2', 'c1')).toEqual({ id: 'c1', name: 'one', tier: 'bronze', creditLimit: 900 });
    const report = await verified('rv2', planned.id);
    expect(report.differences, JSON.stringify(report)).toBe(0);
    expect(report.services.data.checked).toBe(1);

    // The same revert settled by a strategy instead: SOURCE_WINS sets the property back too.
    await patch('rv2', 'c1', { tier: 'platinum' });
    const bySource = await revert('rv2', mergeId, { strategy: 'SOURCE_WINS', dryRun: true });
    expect(bySource.status, JSON.stringify(bySource)).toBe('MERGED');
    expect(await get('rv2', 'c1')).toMatchObject({ tier: 'platinum', creditLimit: 900 }); // a dry run
  }, 240_000);

  it('a revert whose apply meets a later write fails 409 and is compensated; started again, it applies', async () => {
    await s.world('rv4', { objectTypes: { Customer } });
    await put('rv4', 'c1', { id: 'c1', tier: 'bronze', creditLimit: 1 });
    await put('rv4', 'c2', { id: 'c2', tier: 'bronze', creditLimit: 1 });
    await fork('rv4-staging', 'rv4');
    await patch('rv4-staging', 'c1', { tier: 'gold' });
    await patch('rv4-staging', 'c2', { creditLimit: 2 });
    const mergeId = await merge('rv4', 'rv4-staging');
    await patch('rv4', 'c2', { creditLimit: 3 }); // a conflict holds the revert at CONFLICTS
    const planned = await revert('rv4', mergeId);
    expect(planned.status, JSON.stringify(planned)).toBe('CONFLICTS');
    const [conflict] = planned.conflicts as [Conflict];
    await s.controlCall('PUT', `/v1/worlds/rv4/merges/${planned.id}/conflicts/${conflict.id}`, {
      body: { take: 'source' },
    });
    await patch('rv4', 'c1', { creditLimit: 7 }); // the target moves on a key the revert writes
    const before = [await get('rv4', 'c1'), await get('rv4', 'c2')];
    expect((await s.controlCall('POST', `/v1/worlds/rv4/merges/${planned.id}/apply`)).statusCode).toBe(202);
    const failed = await settled('rv4', planned.id);
    expect(['FAILED', 'COMPENSATED'], JSON.stringify(failed)).toContain(failed.status);
    expect(failed.failure?.status).toBe(409);
    expect([await get('rv4', 'c1'), await get('rv4', 'c2')]).toEqual(before);

    // The merge is still MERGED: a new revert plans against the world as it is now.
    const again = await revert('rv4', mergeId, { strategy: 'SOURCE_WINS' });
    expect(again.status, JSON.stringify(again)).toBe('MERGED');
    expect(await get('rv4', 'c1')).toEqual({ id: 'c1', tier: 'bronze', creditLimit: 7 });
    expect(await get('rv4', 'c2')).toEqual({ id: 'c2', tier: 'bronze', creditLimit: 1 });
  }, 240_000);

  it('is documented as enforced: an optional closed body, owner only', async () => {
    const doc = (await s.controlCall('GET', '/docs/json')).json();
    const op = doc.paths['/v1/worlds/{world}/merges/{id}/revert'].post;
    expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['202', '403', '404', '409']));
    const body = op.requestBody;
    expect(body.required ?? false).toBe(false);
    const schema = body.content['application/json'].schema;
    expect(schema.additionalProperties).toBe(false);
    expect(Object.keys(schema.properties).sort()).toEqual(['dryRun', 'strategy']);
  });

  it('bad input: an unknown merge is 404, a world one may not write is 403, a dry run is 409; nothing is written', async () => {
    await s.world('rv3', { objectTypes: { Customer } });
    await put('rv3', 'c1', { id: 'c1', tier: 'bronze' });
    await fork('rv3-staging', 'rv3');
    await patch('rv3-staging', 'c1', { tier: 'gold' });
    const mergeId = await merge('rv3', 'rv3-staging');
    const count = async () => (await s.controlCall('GET', '/v1/worlds/rv3/merges')).json().merges.length as number;
    const before = await count();

    expectProblem(
      await s.controlCall('POST', '/v1/worlds/rv3/merges/0190a5c4-0000-7000-8000-000000000000/revert'),
      404,
    );
    // A merge of another world is unknown here.
    expectProblem(await s.controlCall('POST', `/v1/worlds/rv3-staging/merges/${mergeId}/revert`), 404);
    const viewer = await s.user('rv3-viewer', 'rv3', 'viewer');
    expectProblem(await s.controlCall('POST', `/v1/worlds/rv3/merges/${mergeId}/revert`, { token: viewer }), 403);
    const strategy = await s.controlCall('POST', `/v1/worlds/rv3/merges/${mergeId}/revert`, {
      body: { strategy: 'LOUDEST_WINS' },
    });
    expectProblem(strategy, 400);
    expect(strategy.body).toContain('strategy');

    const dry = await s.controlCall('POST', '/v1/worlds/rv3/merges', {
      body: { source: 'rv3-staging', strategy: 'SOURCE_WINS', dryRun: true },
    });
    const dryRun = await settled('rv3', dry.json().id);
    const refused = await s.controlCall('POST', `/v1/worlds/rv3/merges/${dryRun.id}/revert`);
    expectProblem(refused, 409);
    expect(refused.json().detail).toContain('dry run');

    expect(await count()).toBe(before + 1); // the dry run only
    expect(await get('rv3', 'c1')).toEqual({ id: 'c1', tier: 'gold' });
  }, 180_000);
});
