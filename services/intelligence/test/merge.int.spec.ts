import { newEvent, parseEvent, TOPICS, uuidv7 } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IntelligenceStack, intelligenceStack } from './stack.js';

/**
 * intelligence's part of a merge (issue 17, docs/adr/0037, 0039) on the real stack: control's
 * saga events are published to onto.worlds here, intelligence's replies read from its outbox.
 */

const Customer = {
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, limit: { type: 'integer' } },
};
const schemaDoc = (extra: Record<string, unknown> = {}) => ({
  objectTypes: {
    Customer: {
      apiName: 'Customer',
      ...Customer,
      properties: { ...Customer.properties, ...extra },
    },
  },
  linkTypes: {},
  actionTypes: {},
});
const derived = (expression: string) => ({ objectType: 'Customer', expression });
const times = (n: number) => derived(`self.limit * ${n}`);

type Payload = Record<string, unknown>;

describe('merges of definitions in intelligence', () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world('origin', { objectTypes: { Customer } });
  }, 120_000);
  afterAll(async () => s?.close());

  const put = async (world: string, name: string, body: Payload, path = 'derived-properties') => {
    const res = await s.intelCall('PUT', `/v1/worlds/${world}/${path}/${name}`, { body });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  const remove = async (world: string, name: string, path = 'derived-properties') => {
    const res = await s.intelCall('DELETE', `/v1/worlds/${world}/${path}/${name}`);
    expect(res.statusCode, res.body).toBe(204);
  };
  /** A world's derived properties: name → expression. */
  const expressions = async (world: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${world}/derived-properties`);
    expect(res.statusCode, res.body).toBe(200);
    return Object.fromEntries(
      (res.json().derivedProperties as { name: string; expression: string }[]).map((d) => [d.name, d.expression]),
    );
  };
  const db = () => {
    if (!s.intelligence) throw new Error('no intelligence');
    return s.intelligence.app.pg;
  };
  const position = async (world: string) => {
    const { rows } = await db().query<{ p: string }>(
      'SELECT coalesce(max(seq), 0)::text AS p FROM definition_history WHERE world_id = $1',
      [world],
    );
    return Number(rows[0]?.p);
  };
  /** Forks through control; answers the base position intelligence reported. */
  const fork = async (id: string, from: string): Promise<number> => {
    const res = await s.controlCall('POST', '/v1/worlds', { body: { id, from: { world: from } } });
    expect(res.statusCode, res.body).toBe(202);
    await s.until(`${id} READY`, async () =>
      (await s.controlCall('GET', `/v1/worlds/${id}`)).json().status === 'READY' ? true : undefined,
    );
    const [provisioned] = await published('intelligence.world.provisioned', (e) => e.world_id === id);
    const base = provisioned?.payload.base as { world: string; definitions: number } | undefined;
    expect(base?.world).toBe(from);
    return base?.definitions ?? -1;
  };

  /** intelligence's events in its outbox, in order. */
  const published = async (type: string, match: (e: { world_id: string; payload: Payload }) => boolean, n = 1) =>
    s.until(
      `${n} ${type}`,
      async () => {
        const { rows } = await db().query<{ body: string }>('SELECT body FROM outbox WHERE topic LIKE $1 ORDER BY id', [
          '%onto.intelligence',
        ]);
        const events = rows.map((r) => parseEvent(r.body)).filter((e) => e.type === type && match(e));
        return events.length >= n ? events : undefined;
      },
      30_000,
    );
  const repliesTo = (merge: string, type: string, n = 1) =>
    published(`intelligence.merge.${type}`, (e) => e.payload.merge === merge, n).then((es) => es.map((e) => e.payload));

  /** Publishes one of control's saga events on onto.worlds, keyed by the target. */
  const send = async (type: string, target: string, payload: Payload) => {
    const event = newEvent({
      type: type as 'world.merge.requested',
      worldId: target,
      key: target,
      version: 0,
      producer: 'control',
      producerSeq: 0,
      payload,
    });
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    try {
      await producer.send([
        {
          topic: `${s.prefix}onto.worlds`,
          messages: [{ key: TOPICS['onto.worlds'].key({ worldId: target }), value: JSON.stringify(event) }],
        },
      ]);
    } finally {
      await producer.disconnect();
    }
  };
  const request = async (
    source: string,
    target: string,
    base: { world: string; definitions: number } | null,
    strategy: string,
    opts: { dryRun?: boolean; schema?: Payload } = {},
  ) => {
    const merge = uuidv7();
    await send('world.merge.requested', target, {
      merge,
      source,
      target,
      strategy,
      dryRun: opts.dryRun ?? false,
      base: base && { ...base, schemaVersion: 1, dataSeq: 0 },
      schema: opts.schema ?? schemaDoc(),
      actor: 'tester',
    });
    const [planned] = await repliesTo(merge, 'planned');
    const n = (planned?.conflicts as number) ?? 0;
    const conflicts =
      n === 0 ? [] : (await repliesTo(merge, 'conflicts.found')).flatMap((p) => p.conflicts as Payload[]);
    return { merge, planned: planned as Payload, conflicts };
  };
  const applyMerge = (merge: string, target: string) =>
    send('world.merge.apply', target, { merge, schemaVersion: 1, schema: schemaDoc() });

  it('every case of the table, in both directions, and the merged definitions evaluate the target’s objects', async () => {
    for (const [name, n] of [
      ['un', 2],
      ['src', 2],
      ['tgt', 2],
      ['alike', 2],
      ['del', 2],
      ['mm', 2],
      ['md', 2],
      ['dm', 2],
    ] as const) {
      await put('origin', name, times(n));
    }
    const forkedAt = await fork('left', 'origin');
    expect(forkedAt).toBe(await position('origin'));
    await fork('right', 'origin');
    const base = { world: 'origin', definitions: forkedAt };
    // left: the source of the first merge
    await put('left', 'src', times(3));
    await put('left', 'alike', times(5));
    await put('left', 'add', times(7));
    await remove('left', 'del');
    await put('left', 'mm', times(11));
    await put('left', 'md', times(13));
    await remove('left', 'dm');
    // right: the target
    await put('right', 'tgt', times(17));
    await put('right', 'alike', times(5));
    await put('right', 'mm', times(19));
    await remove('right', 'md');
    await put('right', 'dm', times(23));

    const there = await request('left', 'right', base, 'MANUAL', { dryRun: true });
    expect(there.planned).toMatchObject({ changes: { derived: 3, rules: 0, decisions: 0 }, conflicts: 3 });
    expect(there.conflicts.map((c) => [c.type, (c.entity as Payload).name, c.base, c.source, c.target])).toEqual([
      ['RULE_CONFLICT', 'dm', { ...times(2), aggregates: {}, maxStalenessMs: 60000 }, null, expect.anything()],
      ['RULE_CONFLICT', 'md', expect.anything(), expect.anything(), null],
      ['RULE_CONFLICT', 'mm', expect.anything(), expect.anything(), expect.anything()],
    ]);
    expect(there.conflicts.map((c) => c.id)).toEqual(['i-1', 'i-2', 'i-3']);
    // The other way round: right's one change (tgt) is the source's; the conflicts are the same three.
    const back = await request('right', 'left', base, 'MANUAL', { dryRun: true });
    expect(back.planned).toMatchObject({ changes: { derived: 1 }, conflicts: 3 });
    expect(await expressions('right')).toMatchObject({ tgt: 'self.limit * 17', dm: 'self.limit * 23' });

    const before = await expressions('right');
    const merged = await request('left', 'right', base, 'SOURCE_WINS');
    expect(merged.planned).toMatchObject({ changes: { derived: 6 }, conflicts: 3 });
    await applyMerge(merged.merge, 'right');
    const [applied] = await repliesTo(merged.merge, 'applied');
    expect(applied).toMatchObject({ applied: { derived: 6, rules: 0, decisions: 0 } });
    expect(applied?.target).toBe(await position('right'));
    const after = await expressions('right');
    expect(after).toEqual({
      un: 'self.limit * 2',
      src: 'self.limit * 3',
      tgt: 'self.limit * 17',
      alike: 'self.limit * 5',
      add: 'self.limit * 7',
      mm: 'self.limit * 11',
      md: 'self.limit * 13',
    });
    expect(before.del).toBe('self.limit * 2');

    // The merged definitions compute values for the target's objects.
    const res = await s.dataCall('PUT', '/v1/worlds/right/objects/Customer/c1', {
      body: { properties: { id: 'c1', limit: 10 } },
    });
    expect(res.statusCode, res.body).toBeLessThan(300);
    await s.until('right c1 add = 70 and src = 30', async () => {
      const obj = await s.intelCall('GET', '/v1/worlds/right/objects/Customer/c1', {
        headers: { 'x-consistency-token': String(res.headers['x-consistency-token']) },
      });
      if (obj.statusCode !== 200) return undefined;
      const d = obj.json().derived;
      return d?.add?.value === 70 && d?.src?.value === 30 && d?.mm?.value === 110 ? true : undefined;
    });

    // Asked again (a redelivery under a new id): nothing is written twice.
    await applyMerge(merged.merge, 'right');
    const again = await repliesTo(merged.merge, 'applied', 2);
    expect(again[1]).toEqual(applied);
    expect(await position('right')).toBe(applied?.target);

    // verify: recomputed from the points, the target agrees; a tampered history does not.
    const verification = uuidv7();
    await send('world.merge.verify.requested', 'right', { merge: merged.merge, verification });
    const [verified] = await repliesTo(merged.merge, 'verified');
    expect(verified).toMatchObject({ verification, checked: 6, differences: 0, sample: [] });
    await db().query(
      `UPDATE definition_history SET body = jsonb_set(body, '{expression}', '"self.limit * 99"')
        WHERE world_id = 'right' AND name = 'add'`,
    );
    const second = uuidv7();
    await send('world.merge.verify.requested', 'right', { merge: merged.merge, verification: second });
    const verifiedAgain = (await repliesTo(merged.merge, 'verified', 2))[1];
    expect(verifiedAgain).toMatchObject({ checked: 6, differences: 1 });
    expect(((verifiedAgain?.sample ?? []) as Payload[])[0]).toMatchObject({
      entity: { kind: 'derived', name: 'add' },
      actual: { expression: 'self.limit * 99' },
    });
  }, 240_000);

  it('a merged rule raises alerts for the target’s existing objects; compensating it clears them', async () => {
    const at = await fork('al-src', 'origin');
    await fork('al-tgt', 'origin');
    const written = await s.dataCall('PUT', '/v1/worlds/al-tgt/objects/Customer/big1', {
      body: { properties: { id: 'big1', limit: 50 } },
    });
    expect(written.statusCode, written.body).toBeLessThan(300);
    await put(
      'al-src',
      'big',
      { objectType: 'Customer', condition: 'self.limit > 10', alertType: 'credit.big', severity: 'warning' },
      'rules',
    );
    const m = await request('al-src', 'al-tgt', { world: 'origin', definitions: at }, 'SOURCE_WINS');
    expect(m.planned.changes).toEqual({ derived: 0, rules: 1, decisions: 0 });
    await applyMerge(m.merge, 'al-tgt');
    await repliesTo(m.merge, 'applied');
    const alerts = (status: string) =>
      s.until(`an alert ${status} for big1`, async () => {
        const res = await s.intelCall('GET', `/v1/worlds/al-tgt/alerts?pk=big1&status=${status}`, {
          headers: { 'x-consistency-token': String(written.headers['x-consistency-token']) },
        });
        return res.statusCode === 200 && res.json().alerts.length === 1 ? true : undefined;
      });
    await alerts('OPEN');
    await send('world.merge.compensate', 'al-tgt', { merge: m.merge, reason: 'data failed' });
    expect((await repliesTo(m.merge, 'compensated'))[0]).toMatchObject({ reverted: { rules: 1 }, notReverted: [] });
    await alerts('CLEARED');
    const rule = await s.intelCall('GET', '/v1/worlds/al-tgt/rules/big');
    expect(rule.statusCode).toBe(404);
  }, 120_000);

  it('a plan that cannot be made fails in the plan phase, naming the field', async () => {
    const merge = uuidv7();
    await send('world.merge.requested', 'origin', {
      merge,
      source: 'nowhere',
      target: 'origin',
      strategy: 'SOURCE_WINS',
      dryRun: false,
      base: null,
      schema: schemaDoc(),
      actor: 'tester',
    });
    expect((await repliesTo(merge, 'failed'))[0]).toMatchObject({ phase: 'plan', status: 404, field: 'source' });
    const { rowCount } = await db().query('SELECT 1 FROM definition_merges WHERE id = $1', [merge]);
    expect(rowCount).toBe(0);
  }, 60_000);

  it('a fork reports its base position; a merge from it later sees only what changed since', async () => {
    await put('origin', 'late', times(2));
    const forkedAt = await fork('kid', 'origin');
    expect(forkedAt).toBe(await position('origin'));
    await put('origin', 'late', times(3)); // the target's own change, after the fork
    await put('kid', 'mine', times(4));
    const m = await request('kid', 'origin', { world: 'origin', definitions: forkedAt }, 'MANUAL', { dryRun: true });
    expect(m.planned).toMatchObject({ changes: { derived: 1 }, conflicts: 0 });
    // Against an empty base, the kid's copy of `late` and origin's change look like two additions that differ.
    const empty = await request('kid', 'origin', null, 'MANUAL', { dryRun: true });
    expect(empty.conflicts.map((c) => (c.entity as Payload).name)).toEqual(['late']);
  }, 120_000);

  it('TIMESTAMP_WINS takes the newer change, and the greater definition seq at the same instant', async () => {
    await put('origin', 'ts', times(2));
    await put('origin', 'tie', times(2));
    const at = await fork('ts-src', 'origin');
    await fork('ts-tgt', 'origin');
    await put('ts-src', 'ts', times(3)); // older
    await put('ts-tgt', 'ts', times(4)); // newer: the target's wins
    await put('ts-tgt', 'tie', times(5));
    await put('ts-src', 'tie', times(6)); // greater seq
    // The two changes of `tie` at one instant: the greater seq (the source's) decides.
    await db().query(
      `UPDATE definition_history SET written_at = '2026-01-01T00:00:00Z'
        WHERE world_id IN ('ts-src', 'ts-tgt') AND name = 'tie' AND seq > $1`,
      [at],
    );
    const m = await request('ts-src', 'ts-tgt', { world: 'origin', definitions: at }, 'TIMESTAMP_WINS');
    expect(m.conflicts.map((c) => (c.entity as Payload).name)).toEqual(['tie', 'ts']);
    expect(m.conflicts[0]).toMatchObject({ sourceAt: expect.stringMatching(/^2026-01-01/) });
    await applyMerge(m.merge, 'ts-tgt');
    await repliesTo(m.merge, 'applied');
    expect(await expressions('ts-tgt')).toMatchObject({ ts: 'self.limit * 4', tie: 'self.limit * 6' });
  }, 120_000);

  it('MANUAL: conflicts stay open until resolved; a value is checked as a PUT would', async () => {
    await put('origin', 'm1', times(2));
    await put('origin', 'm2', times(2));
    const at = await fork('man-src', 'origin');
    await fork('man-tgt', 'origin');
    for (const [world, n] of [
      ['man-src', 3],
      ['man-tgt', 4],
    ] as const) {
      await put(world, 'm1', times(n));
      await put(world, 'm2', times(n));
    }
    const base = { world: 'origin', definitions: at };
    const m = await request('man-src', 'man-tgt', base, 'MANUAL');
    expect(m.conflicts.map((c) => c.id)).toEqual(['i-1', 'i-2']);
    await applyMerge(m.merge, 'man-tgt');
    expect((await repliesTo(m.merge, 'failed'))[0]).toMatchObject({ phase: 'apply', status: 409 });

    // A value that does not hold (an unknown property): refused at the apply, nothing written.
    await send('world.merge.conflict.resolved', 'man-tgt', { merge: m.merge, conflict: 'i-1', take: 'source' });
    await send('world.merge.conflict.resolved', 'man-tgt', {
      merge: m.merge,
      conflict: 'i-2',
      take: 'value',
      value: derived('self.nope + 1'),
    });
    await applyMerge(m.merge, 'man-tgt');
    const failed = (await repliesTo(m.merge, 'failed', 2))[1];
    expect(failed).toMatchObject({ phase: 'apply', status: 422, field: expect.stringMatching(/^derived\/m2/) });
    expect(await expressions('man-tgt')).toMatchObject({ m1: 'self.limit * 4', m2: 'self.limit * 4' });

    await send('world.merge.conflict.resolved', 'man-tgt', {
      merge: m.merge,
      conflict: 'i-2',
      take: 'value',
      value: derived('self.limit + 1'),
    });
    await applyMerge(m.merge, 'man-tgt');
    await repliesTo(m.merge, 'applied');
    expect(await expressions('man-tgt')).toMatchObject({ m1: 'self.limit * 3', m2: 'self.limit + 1' });
    const verification = uuidv7();
    await send('world.merge.verify.requested', 'man-tgt', { merge: m.merge, verification });
    expect((await repliesTo(m.merge, 'verified'))[0]).toMatchObject({ checked: 2, differences: 0 });
  }, 120_000);

  it('a definition that does not hold against the merged schema is a RULE_CONFLICT', async () => {
    const at = await fork('sch-src', 'origin');
    await fork('sch-tgt', 'origin');
    const added = await s.controlCall('PUT', '/v1/worlds/sch-src/object-types/Customer', {
      body: { ...Customer, properties: { ...Customer.properties, extra: { type: 'integer' } } },
    });
    expect(added.statusCode, added.body).toBe(200);
    await s.until('sch-src has extra', async () => {
      const res = await s.intelCall('PUT', '/v1/worlds/sch-src/derived-properties/uses', {
        body: derived('self.extra * 2'),
      });
      return res.statusCode < 300 ? true : undefined;
    });
    const base = { world: 'origin', definitions: at };
    const without = await request('sch-src', 'sch-tgt', base, 'SOURCE_WINS');
    expect(without.conflicts).toEqual([
      expect.objectContaining({
        id: 'i-1',
        type: 'RULE_CONFLICT',
        entity: { kind: 'derived', name: 'uses' },
        base: null,
        target: null,
        reason: expect.stringMatching(/extra/),
      }),
    ]);
    // SOURCE_WINS cannot write what would not hold: the target's side (none) is kept.
    expect(without.planned.changes).toEqual({ derived: 0, rules: 0, decisions: 0 });
    const withExtra = await request('sch-src', 'sch-tgt', base, 'SOURCE_WINS', {
      schema: schemaDoc({ extra: { type: 'integer' } }),
    });
    expect(withExtra.conflicts).toEqual([]);
    expect(withExtra.planned.changes).toMatchObject({ derived: 1 });
  }, 120_000);

  it('the apply fails with 409 when the target changed since the plan; compensation writes back', async () => {
    await put('origin', 'c1', times(2));
    await put('origin', 'c2', times(2));
    const at = await fork('cmp-src', 'origin');
    await fork('cmp-tgt', 'origin');
    await put('cmp-src', 'c1', times(3));
    await put('cmp-src', 'c2', times(3));
    await put('cmp-src', 'c3', times(3));
    const base = { world: 'origin', definitions: at };

    const raced = await request('cmp-src', 'cmp-tgt', base, 'SOURCE_WINS');
    await put('cmp-tgt', 'c2', times(5)); // after the plan read it
    const before = await expressions('cmp-tgt');
    await applyMerge(raced.merge, 'cmp-tgt');
    expect((await repliesTo(raced.merge, 'failed'))[0]).toMatchObject({
      phase: 'apply',
      status: 409,
      field: 'derived/c2',
    });
    expect(await expressions('cmp-tgt')).toEqual(before);

    const m = await request('cmp-src', 'cmp-tgt', base, 'SOURCE_WINS');
    expect(m.planned.changes).toMatchObject({ derived: 3 });
    await applyMerge(m.merge, 'cmp-tgt');
    await repliesTo(m.merge, 'applied');
    expect(await expressions('cmp-tgt')).toMatchObject({
      c1: 'self.limit * 3',
      c2: 'self.limit * 3',
      c3: 'self.limit * 3',
    });
    await put('cmp-tgt', 'c1', times(9)); // written again since the merge: left as it is
    await send('world.merge.compensate', 'cmp-tgt', { merge: m.merge, reason: 'data failed' });
    const [compensated] = await repliesTo(m.merge, 'compensated');
    expect(compensated).toMatchObject({
      reverted: { derived: 2, rules: 0, decisions: 0 },
      notReverted: [expect.objectContaining({ kind: 'derived', name: 'c1' })],
    });
    expect(await expressions('cmp-tgt')).toEqual({ ...before, c1: 'self.limit * 9' });

    // Compensated before it applied: a late apply does nothing.
    const late = await request('cmp-src', 'cmp-tgt', base, 'SOURCE_WINS');
    await send('world.merge.compensate', 'cmp-tgt', { merge: late.merge, reason: 'control failed' });
    await repliesTo(late.merge, 'compensated');
    const unchanged = await expressions('cmp-tgt');
    await applyMerge(late.merge, 'cmp-tgt');
    expect((await repliesTo(late.merge, 'failed'))[0]).toMatchObject({ phase: 'apply', status: 409 });
    expect(await expressions('cmp-tgt')).toEqual(unchanged);
  }, 120_000);
});
