import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from '../services/intelligence/test/stack.js';
import { type Conflict, Customer, MERGE_STACK, type Merge, mergeCalls } from './merge-helpers.js';

/**
 * Merges end to end (issue 17, docs/adr/0037): control orchestrates, data and intelligence each
 * plan and apply their part over Kafka. Every check reads the services' own APIs.
 */

describe('merges across the three services', () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack(MERGE_STACK);
  }, 120_000);
  afterAll(async () => s?.close());

  const { put, patch, remove, get, fork, merge, settled } = mergeCalls(() => s);
  const define = async (world: string, path: string, body: Record<string, unknown>) => {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/${path}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  /** Data has caught up with everything written so far in a world (its writes answer in order). */
  const snapshot = async (world: string, pks: string[]) =>
    Object.fromEntries(await Promise.all(pks.map(async (pk) => [pk, await get(world, pk)] as const)));

  it('MANUAL: the seven cases, conflicts resolved one by one, applied to the target only', async () => {
    await s.world('m1', { objectTypes: { Customer } });
    for (const pk of ['same', 'src', 'tgt', 'both', 'alike', 'del', 'moddel', 'delmod'])
      await put('m1', pk, { id: pk, name: pk, tier: 'bronze', creditLimit: 100 });
    await fork('m1-staging', 'm1');

    await patch('m1-staging', 'src', { tier: 'gold' }); // taken from the source
    await patch('m1', 'tgt', { tier: 'silver' }); // kept from the target
    await patch('m1-staging', 'both', { creditLimit: 500 }); // MODIFY_MODIFY
    await patch('m1', 'both', { creditLimit: 900, name: 'renamed' }); // and an independent property
    await patch('m1-staging', 'alike', { tier: 'gold' });
    await patch('m1', 'alike', { tier: 'gold' }); // the same change: no conflict
    await put('m1-staging', 'added', { id: 'added', name: 'new', tier: 'bronze', creditLimit: 1 });
    await remove('m1-staging', 'del'); // deleted in the source
    await patch('m1-staging', 'moddel', { tier: 'gold' });
    await remove('m1', 'moddel'); // MODIFY_DELETE
    await remove('m1-staging', 'delmod');
    await patch('m1', 'delmod', { tier: 'gold' }); // MODIFY_DELETE, the other way round

    const id = await merge('m1', { source: 'm1-staging', strategy: 'MANUAL' });
    const planned = await settled('m1', id);
    expect(planned.status).toBe('CONFLICTS');
    const byType = planned.conflicts.map(
      (c) => `${c.type} ${c.entity.pk}${c.entity.property ? `.${c.entity.property}` : ''}`,
    );
    expect(byType.sort()).toEqual(['MODIFY_DELETE delmod', 'MODIFY_DELETE moddel', 'MODIFY_MODIFY both.creditLimit']);

    // Applying with a conflict open is refused, naming how many are left.
    const early = await s.controlCall('POST', `/v1/worlds/m1/merges/${id}/apply`);
    expect(early.statusCode, early.body).toBe(409);

    const conflict = (pk: string) => planned.conflicts.find((c) => c.entity.pk === pk) as Conflict;
    const resolve = (c: Conflict, body: Record<string, unknown>) =>
      s.controlCall('PUT', `/v1/worlds/m1/merges/${id}/conflicts/${c.id}`, { body });
    // A value that fails the schema is refused, naming the field, and resolves nothing.
    const bad = await resolve(conflict('both'), { take: 'value', value: 'lots' });
    expect(bad.statusCode, bad.body).toBe(422);
    expect((await resolve(conflict('both'), { take: 'value', value: 700 })).statusCode).toBe(200);
    expect((await resolve(conflict('both'), { take: 'source' })).statusCode).toBe(409); // resolved already
    expect((await resolve(conflict('moddel'), { take: 'source' })).statusCode).toBe(200);
    expect((await resolve(conflict('delmod'), { take: 'target' })).statusCode).toBe(200);

    const applied = await s.controlCall('POST', `/v1/worlds/m1/merges/${id}/apply`);
    expect(applied.statusCode, applied.body).toBe(202);
    const done = await settled('m1', id, ['MERGED', 'FAILED', 'COMPENSATED']);
    expect(done.status, JSON.stringify(done)).toBe('MERGED');

    const after = await s.until('the merge in data', async () => {
      const o = await get('m1', 'both');
      return o?.creditLimit === 700 ? o : undefined;
    });
    expect(after).toMatchObject({ creditLimit: 700, name: 'renamed' });
    expect(await snapshot('m1', ['same', 'src', 'tgt', 'alike', 'added', 'del', 'moddel', 'delmod'])).toEqual({
      same: { id: 'same', name: 'same', tier: 'bronze', creditLimit: 100 },
      src: { id: 'src', name: 'src', tier: 'gold', creditLimit: 100 },
      tgt: { id: 'tgt', name: 'tgt', tier: 'silver', creditLimit: 100 },
      alike: { id: 'alike', name: 'alike', tier: 'gold', creditLimit: 100 },
      added: { id: 'added', name: 'new', tier: 'bronze', creditLimit: 1 },
      del: null,
      moddel: { id: 'moddel', name: 'moddel', tier: 'gold', creditLimit: 100 },
      delmod: { id: 'delmod', name: 'delmod', tier: 'gold', creditLimit: 100 },
    });
    // The source is untouched.
    expect(await get('m1-staging', 'tgt')).toMatchObject({ tier: 'bronze' });
    expect(await get('m1-staging', 'delmod')).toBeNull();

    // The history lists it; merging again raises nothing settled the first time.
    const history = (await s.controlCall('GET', '/v1/worlds/m1/merges')).json();
    expect(JSON.stringify(history)).toContain(id);
    const again = await settled('m1', await merge('m1', { source: 'm1-staging', strategy: 'MANUAL' }));
    expect(again.status, JSON.stringify(again)).toBe('MERGED');
    expect(again.conflicts).toEqual([]);
    // Back the other way: the target's changes go to the source with no conflict either.
    const back = await settled('m1-staging', await merge('m1-staging', { source: 'm1', strategy: 'MANUAL' }));
    expect(back.status, JSON.stringify(back)).toBe('MERGED');
    await s.until('the back-merge in data', async () =>
      (await get('m1-staging', 'tgt'))?.tier === 'silver' ? true : undefined,
    );
    expect(await get('m1-staging', 'both')).toMatchObject({ creditLimit: 700, name: 'renamed' });
  }, 180_000);

  it('derived values and alerts follow a merge into the target', async () => {
    await s.world('m2', { objectTypes: { Customer } });
    await define('m2', 'derived-properties/doubled', { objectType: 'Customer', expression: 'self.creditLimit * 2' });
    await define('m2', 'rules/risky', {
      objectType: 'Customer',
      condition: 'self.creditLimit > 1000',
      alertType: 'credit.high',
      severity: 'warning',
    });
    await put('m2', 'c1', { id: 'c1', creditLimit: 10 });
    await fork('m2-staging', 'm2');
    await patch('m2-staging', 'c1', { creditLimit: 5000 });
    // A derived property the fork added comes back with the merge and is computed in the target.
    await define('m2-staging', 'derived-properties/tripled', {
      objectType: 'Customer',
      expression: 'self.creditLimit * 3',
    });
    const done = await settled('m2', await merge('m2', { source: 'm2-staging', strategy: 'SOURCE_WINS' }));
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    await s.until('the derived value recomputed in the target', async () => {
      const res = await s.intelCall('GET', '/v1/worlds/m2/objects/Customer/c1/derived');
      const derived = res.statusCode === 200 ? res.json().derived : {};
      return derived.doubled?.value === 10000 && derived.tripled?.value === 15000 ? true : undefined;
    });
    await s.until('the alert raised in the target', async () => {
      const res = await s.intelCall('GET', '/v1/worlds/m2/alerts');
      return res.statusCode === 200 && JSON.stringify(res.json()).includes('credit.high') ? true : undefined;
    });
  }, 180_000);

  it('a target written after the plan fails the apply with 409 and is left exactly as it was', async () => {
    await s.world('m3', { objectTypes: { Customer } });
    for (const pk of ['a', 'b', 'c']) await put('m3', pk, { id: pk, tier: 'bronze', creditLimit: 1 });
    await fork('m3-staging', 'm3');
    await patch('m3-staging', 'a', { tier: 'gold' });
    await patch('m3-staging', 'b', { creditLimit: 2 });
    await patch('m3-staging', 'c', { creditLimit: 3 });
    await patch('m3', 'c', { creditLimit: 4 }); // a conflict keeps the merge waiting in CONFLICTS
    const id = await merge('m3', { source: 'm3-staging', strategy: 'MANUAL' });
    const planned = await settled('m3', id);
    expect(planned.status).toBe('CONFLICTS');
    await s.controlCall('PUT', `/v1/worlds/m3/merges/${id}/conflicts/${planned.conflicts[0]?.id}`, {
      body: { take: 'source' },
    });
    await patch('m3', 'b', { tier: 'platinum' }); // the target moves on a key the merge writes
    const before = await snapshot('m3', ['a', 'b', 'c']);
    expect((await s.controlCall('POST', `/v1/worlds/m3/merges/${id}/apply`)).statusCode).toBe(202);
    const done = await settled('m3', id, ['MERGED', 'FAILED', 'COMPENSATED']);
    expect(['FAILED', 'COMPENSATED']).toContain(done.status);
    expect(done.failure?.status).toBe(409);
    expect(await snapshot('m3', ['a', 'b', 'c'])).toEqual(before);
  }, 180_000);

  it('two merges into one target at once: one runs, the other is refused', async () => {
    await s.world('m4', { objectTypes: { Customer } });
    await put('m4', 'x', { id: 'x', tier: 'bronze' });
    await fork('m4-a', 'm4');
    await fork('m4-b', 'm4');
    await patch('m4-a', 'x', { tier: 'gold' });
    await patch('m4-b', 'x', { tier: 'silver' });
    const [a, b] = await Promise.all(
      ['m4-a', 'm4-b'].map((source) =>
        s.controlCall('POST', '/v1/worlds/m4/merges', { body: { source, strategy: 'SOURCE_WINS' } }),
      ),
    );
    expect([a?.statusCode, b?.statusCode].sort()).toEqual([202, 409]);
  }, 180_000);

  const rule = (condition: string) => ({
    objectType: 'Customer',
    condition,
    alertType: 'credit.high',
    severity: 'warning',
  });
  const schemaOf = async (world: string) => (await s.controlCall('GET', `/v1/worlds/${world}/schema`)).json();
  const putType = async (world: string, type: Record<string, unknown>) => {
    const { version } = await schemaOf(world);
    const res = await s.controlCall('PUT', `/v1/worlds/${world}/object-types/Customer`, {
      body: type,
      headers: { 'if-match': `"${version}"` },
    });
    expect(res.statusCode, res.body).toBe(200);
  };

  it('a failure in intelligence during the apply compensates data and control: the target as before, object by object', async () => {
    await s.world('m6', { objectTypes: { Customer } });
    await define('m6', 'rules/risky', rule('self.creditLimit > 1000'));
    const pks = ['a', 'b', 'c', 'd'];
    for (const pk of pks) await put('m6', pk, { id: pk, tier: 'bronze', creditLimit: 1 });
    await fork('m6-staging', 'm6');
    await patch('m6-staging', 'a', { tier: 'gold' });
    await put('m6-staging', 'e', { id: 'e', tier: 'new' });
    await remove('m6-staging', 'b');
    await patch('m6-staging', 'c', { creditLimit: 2 });
    await patch('m6', 'c', { creditLimit: 3 }); // a conflict holds the merge at CONFLICTS
    await putType('m6-staging', {
      ...Customer,
      properties: { ...Customer.properties, segment: { type: 'string' } },
    });
    await define('m6-staging', 'rules/risky', rule('self.creditLimit > 500'));
    const id = await merge('m6', { source: 'm6-staging', strategy: 'MANUAL' });
    const planned = await settled('m6', id);
    expect(planned.status, JSON.stringify(planned)).toBe('CONFLICTS');
    for (const c of planned.conflicts)
      expect(
        (await s.controlCall('PUT', `/v1/worlds/m6/merges/${id}/conflicts/${c.id}`, { body: { take: 'source' } }))
          .statusCode,
      ).toBe(200);
    // The target's rule moves after intelligence planned: its part fails 409 at the apply.
    await define('m6', 'rules/risky', rule('self.creditLimit > 2000'));
    const objectsBefore = await snapshot('m6', [...pks, 'e']);
    const schemaBefore = await schemaOf('m6');
    expect((await s.controlCall('POST', `/v1/worlds/m6/merges/${id}/apply`)).statusCode).toBe(202);
    const done = await settled('m6', id, ['MERGED', 'FAILED', 'COMPENSATED']);
    expect(done.status, JSON.stringify(done)).toBe('COMPENSATED');
    expect(done.failure?.status).toBe(409);
    expect(await snapshot('m6', [...pks, 'e'])).toEqual(objectsBefore);
    const schemaAfter = await schemaOf('m6');
    expect(schemaAfter.objectTypes).toEqual(schemaBefore.objectTypes);
    const risky = (await s.intelCall('GET', '/v1/worlds/m6/rules/risky')).json();
    expect(risky.condition).toBe('self.creditLimit > 2000');
  }, 180_000);

  it('SCHEMA_CONFLICT and RULE_CONFLICT under MANUAL, resolved one each way', async () => {
    await s.world('m7', { objectTypes: { Customer } });
    await define('m7', 'rules/risky', rule('self.creditLimit > 1000'));
    await fork('m7-staging', 'm7');
    const withTier = (tier: Record<string, unknown>) => ({ ...Customer, properties: { ...Customer.properties, tier } });
    await putType('m7-staging', withTier({ type: 'string', indexed: true }));
    await putType('m7', withTier({ type: 'string', required: false, description: 'the target says so' }));
    await define('m7-staging', 'rules/risky', rule('self.creditLimit > 500'));
    await define('m7', 'rules/risky', rule('self.creditLimit > 2000'));
    const id = await merge('m7', { source: 'm7-staging', strategy: 'MANUAL' });
    const planned = await settled('m7', id);
    expect(planned.status, JSON.stringify(planned)).toBe('CONFLICTS');
    expect(planned.conflicts.map((c) => c.type).sort()).toEqual(['RULE_CONFLICT', 'SCHEMA_CONFLICT']);
    for (const c of planned.conflicts) {
      const take = c.type === 'SCHEMA_CONFLICT' ? 'source' : 'target';
      const res = await s.controlCall('PUT', `/v1/worlds/m7/merges/${id}/conflicts/${c.id}`, { body: { take } });
      expect(res.statusCode, res.body).toBe(200);
    }
    expect((await s.controlCall('POST', `/v1/worlds/m7/merges/${id}/apply`)).statusCode).toBe(202);
    const done = await settled('m7', id, ['MERGED', 'FAILED', 'COMPENSATED']);
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    expect((await schemaOf('m7')).objectTypes.Customer.properties.tier).toMatchObject({
      type: 'string',
      indexed: true,
    });
    expect((await s.intelCall('GET', '/v1/worlds/m7/rules/risky')).json().condition).toBe('self.creditLimit > 2000');
  }, 180_000);

  it('TIMESTAMP_WINS takes, per property, the side that changed it last', async () => {
    await s.world('m8', { objectTypes: { Customer } });
    await put('m8', 'x', { id: 'x', tier: 'bronze', creditLimit: 1, name: 'x' });
    await fork('m8-staging', 'm8');
    await patch('m8', 'x', { tier: 'silver' }); // the target first …
    await patch('m8-staging', 'x', { creditLimit: 5 }); // … the source first
    await patch('m8-staging', 'x', { tier: 'gold' }); // … then the source, later
    await patch('m8', 'x', { creditLimit: 9 }); // … then the target, later
    const done = await settled('m8', await merge('m8', { source: 'm8-staging', strategy: 'TIMESTAMP_WINS' }));
    expect(done.status, JSON.stringify(done)).toBe('MERGED');
    await s.until('the merge in data', async () => ((await get('m8', 'x'))?.tier === 'gold' ? true : undefined));
    expect(await get('m8', 'x')).toEqual({ id: 'x', tier: 'gold', creditLimit: 9, name: 'x' });
  }, 180_000);

  it('writes racing a merge into its target are kept or fail the merge with 409, never lost; merge-verify agrees', async () => {
    await s.world('m9', { objectTypes: { Customer } });
    const keys = Array.from({ length: 60 }, (_, i) => `k${i}`);
    for (const pk of keys) await put('m9', pk, { id: pk, creditLimit: 0 });
    await fork('m9-staging', 'm9');
    for (const pk of keys) await patch('m9-staging', pk, { tier: 'gold', creditLimit: 1 });
    // A writer changes every other key of the target, three rounds, while merges run.
    const written = new Map<string, number>();
    const writer = (async () => {
      for (let round = 1; round <= 3; round++)
        for (const pk of keys.filter((_, i) => i % 2 === 0)) {
          const res = await s.dataCall('PATCH', `/v1/worlds/m9/objects/Customer/${pk}`, {
            body: { properties: { name: `w${round}` } },
          });
          expect(res.statusCode, res.body).toBe(200);
          written.set(pk, round);
        }
    })();
    const outcomes: string[] = [];
    let merged: Merge | undefined;
    for (let attempt = 0; attempt < 8 && !merged; attempt++) {
      const m = await settled('m9', await merge('m9', { source: 'm9-staging', strategy: 'SOURCE_WINS' }), [
        'MERGED',
        'FAILED',
        'COMPENSATED',
      ]);
      outcomes.push(m.status);
      if (m.status === 'MERGED') merged = m;
      else expect(m.failure?.status, JSON.stringify(m)).toBe(409);
    }
    await writer;
    if (!merged) throw new Error(`no merge went through: ${outcomes.join(', ')}`);
    const mergeId = merged.id;
    // Every acknowledged write is there; every merged property too where the merge went through.
    for (const pk of keys) {
      const o = await get('m9', pk);
      const round = written.get(pk);
      expect(o?.name, `${pk} after ${outcomes.join(', ')}`).toBe(round === undefined ? undefined : `w${round}`);
      expect(o, pk).toMatchObject({ tier: 'gold', creditLimit: 1 });
    }
    const verify = await s.controlCall('POST', `/v1/admin/worlds/m9/merges/${mergeId}/verify`);
    expect(verify.statusCode, verify.body).toBe(202);
    const report = await s.until<{ differences: number; services: { data: { checked: number } } }>(
      'merge-verify complete',
      async () => {
        const res = await s.controlCall('GET', `/v1/admin/worlds/m9/merges/${mergeId}/verify`);
        return res.statusCode === 200 && res.json().complete ? res.json() : undefined;
      },
    );
    expect(report.differences, JSON.stringify(report)).toBe(0);
    expect(report.services.data.checked).toBeGreaterThan(0);
  }, 240_000);

  it('bad input names the field and applies nothing', async () => {
    await s.world('m5', { objectTypes: { Customer } });
    const post = (body: Record<string, unknown>, target = 'm5') =>
      s.controlCall('POST', `/v1/worlds/${target}/merges`, { body });
    expect((await post({ source: 'nope', strategy: 'SOURCE_WINS' })).statusCode).toBe(404);
    expect((await post({ source: 'm5', strategy: 'SOURCE_WINS' }, 'nope')).statusCode).toBe(404);
    const self = await post({ source: 'm5', strategy: 'SOURCE_WINS' });
    expect(self.statusCode, self.body).toBe(422);
    expect(self.body).toContain('source');
    const strategy = await post({ source: 'm5', strategy: 'LOUDEST_WINS' });
    expect(strategy.statusCode, strategy.body).toBe(400);
    expect(strategy.headers['content-type']).toContain('application/problem+json');
  }, 60_000);
});
