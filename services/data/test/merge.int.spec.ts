import { type EventType, inTransaction, newEvent, Outbox, TOPICS, uuidv7 } from '@onto/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, forkThroughControl, type Stack } from './stack.js';

/*
 * data's part of merges (docs/adr/0037, 0038) on the real stack. control's part is not here: the
 * test sends control's events on onto.worlds itself and reads data's replies (onto.storage).
 */

const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer' },
    status: { type: 'string' },
    note: { type: 'string' },
  },
};
const Customer = { displayName: 'Customer', primaryKey: 'id', properties: { id: { type: 'string', required: true } } };
const placed = { from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' };

type Props = Record<string, unknown>;
type Reply = { type: string; payload: Record<string, unknown> };

describe('merges in data', () => {
  let s: Stack;
  let n = 0;

  const put = async (world: string, pk: string, properties: Props, type = 'Order') => {
    const res = await s.dataCall('PUT', `/v1/worlds/${world}/objects/${type}/${pk}`, { body: { properties } });
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  const del = async (world: string, pk: string) => {
    const res = await s.dataCall('DELETE', `/v1/worlds/${world}/objects/Order/${pk}`);
    expect(res.statusCode, res.body).toBe(204);
  };
  const link = async (world: string, from: string, to: string, method: 'PUT' | 'DELETE' = 'PUT') => {
    const res = await s.dataCall(method, `/v1/worlds/${world}/links/placed/${from}/${to}`);
    expect(res.statusCode, res.body).toBeLessThan(300);
  };
  const get = async (world: string, pk: string): Promise<Props | null> => {
    const res = await s.dataCall('GET', `/v1/worlds/${world}/objects/Order/${pk}`);
    return res.statusCode === 404 ? null : (res.json().properties as Props);
  };
  const schemaOf = async (world: string) =>
    (
      await s.data.app.pg.query<{ document: Props; version: number }>(
        'SELECT document, version FROM schema_versions WHERE world_id = $1 ORDER BY version DESC LIMIT 1',
        [world],
      )
    ).rows[0] as { document: Props; version: number };

  /** An event of control's on onto.worlds, keyed by the target. */
  const send = async (target: string, type: EventType, payload: Props) => {
    await inTransaction(s.control.app.pg, async (tx) => {
      await new Outbox(tx, s.prefix).add({
        event: newEvent({
          type,
          worldId: target,
          key: target,
          version: 0,
          producer: 'control',
          producerSeq: 0,
          payload,
        }),
        key: TOPICS['onto.worlds'].key({ worldId: target }),
      } as never);
    });
  };
  /** data's replies about a merge (its outbox rows for onto.storage), once `done` holds. */
  const replies = (merge: string, done: (r: Reply[]) => boolean) =>
    s.until(
      `data's replies to merge ${merge}`,
      async () => {
        const { rows } = await s.data.app.pg.query<{ body: string }>(
          `SELECT body FROM outbox WHERE topic LIKE '%onto.storage' AND body LIKE $1 ORDER BY id`,
          [`%${merge}%`],
        );
        const found = rows.map((r) => JSON.parse(r.body) as Reply);
        return done(found) ? found : undefined;
      },
      30_000,
    );
  const ended = (types: string[]) => (r: Reply[]) => r.some((x) => types.includes(x.type));

  /** Two worlds: a target with a schema and `seed`, and a source forked from it. Answers the base. */
  const pair = async (seed: (t: string) => Promise<void>) => {
    n++;
    const target = `mt${n}`;
    const source = `ms${n}`;
    await s.world(target, { objectTypes: { Order, Customer }, linkTypes: { placed } });
    await seed(target);
    const forkSeq = await forkThroughControl(s, source, target);
    const { version } = await schemaOf(target);
    return { target, source, base: { world: target, schemaVersion: version, dataSeq: forkSeq, definitions: 0 } };
  };

  interface Merge {
    target: string;
    source: string;
    base: Props | null;
    strategy?: string;
    dryRun?: boolean;
    schema?: Props;
  }
  /** world.merge.requested, and data's replies up to planned or failed. */
  const plan = async (m: Merge) => {
    const merge = uuidv7();
    await send(m.target, 'world.merge.requested', {
      merge,
      source: m.source,
      target: m.target,
      strategy: m.strategy ?? 'SOURCE_WINS',
      dryRun: m.dryRun ?? false,
      base: m.base,
      schema: m.schema ?? (await schemaOf(m.target)).document,
      actor: 'merger',
    });
    const r = await replies(merge, ended(['merge.planned', 'merge.failed']));
    const conflicts = r
      .filter((x) => x.type === 'merge.conflicts.found')
      .flatMap((x) => x.payload.conflicts as Props[]);
    const planned = r.find((x) => x.type === 'merge.planned')?.payload;
    return { merge, conflicts, planned, failed: r.find((x) => x.type === 'merge.failed')?.payload };
  };
  /** world.merge.apply, and data's answer to it (the reply after those before it). */
  const apply = async (target: string, merge: string) => {
    const answers = (r: Reply[]) =>
      r.filter((x) => x.type === 'merge.applied' || (x.type === 'merge.failed' && x.payload.phase === 'apply'));
    const before = answers(await replies(merge, () => true)).length;
    const { version, document } = await schemaOf(target);
    await send(target, 'world.merge.apply', { merge, schemaVersion: Math.max(1, version), schema: document });
    const r = await replies(merge, (all) => answers(all).length > before);
    return answers(r).at(-1)?.payload as Props;
  };
  const byPk = (conflicts: Props[]) =>
    Object.fromEntries(
      conflicts.map((c) => {
        const e = c.entity as Props;
        return [
          `${e.pk ?? `${(e.from as Props)?.pk}->${(e.to as Props)?.pk}`}${e.property ? `.${e.property}` : ''}`,
          c.type,
        ];
      }),
    );

  beforeAll(async () => {
    s = await dataStack();
  });
  afterAll(async () => {
    await s?.close();
  });

  /** The seven cases, set up once on each side (then merged one way and the other). */
  const sevenCases = async () => {
    const w = await pair(async (t) => {
      for (const pk of ['u', 's1', 't1', 'same', 'mm', 'ind', 'del', 'tdel', 'md', 'dm']) {
        await put(t, pk, { amount: 10, status: 'open' });
      }
    });
    // source
    await put(w.source, 's1', { amount: 11, status: 'open' });
    await put(w.source, 'same', { amount: 5, status: 'open' });
    await put(w.source, 'mm', { amount: 11, status: 'open' });
    await put(w.source, 'ind', { amount: 11, status: 'open' });
    await del(w.source, 'del');
    await put(w.source, 'md', { amount: 11, status: 'open' });
    await del(w.source, 'dm');
    await put(w.source, 'as', { amount: 1 });
    await put(w.source, 'ab', { amount: 1, status: 'new' });
    // target
    await put(w.target, 't1', { amount: 12, status: 'open' });
    await put(w.target, 'same', { amount: 5, status: 'open' });
    await put(w.target, 'mm', { amount: 12, status: 'open' });
    await put(w.target, 'ind', { amount: 10, status: 'paid' });
    await del(w.target, 'tdel');
    await del(w.target, 'md');
    await put(w.target, 'dm', { amount: 12, status: 'open' });
    await put(w.target, 'at', { amount: 2 });
    await put(w.target, 'ab', { amount: 2, status: 'new' });
    return w;
  };
  /** The objects a plan changes in the target: pk → merged state. */
  const items = async (merge: string) =>
    Object.fromEntries(
      (
        await s.data.app.pg.query<{ pk: string; merged: Props | null }>(
          `SELECT pk, merged FROM merge_items WHERE merge_id = $1 AND kind = 'object' AND merged IS DISTINCT FROM target`,
          [merge],
        )
      ).rows.map((r) => [r.pk, r.merged]),
    );

  it('the seven cases per property, in both directions; a dry run applies nothing', async () => {
    const w = await sevenCases();
    const expected = {
      'mm.amount': 'MODIFY_MODIFY',
      md: 'MODIFY_DELETE',
      dm: 'MODIFY_DELETE',
      'ab.amount': 'MODIFY_MODIFY',
    };
    const forward = await plan({ ...w, strategy: 'MANUAL', dryRun: true });
    expect(forward.failed).toBeUndefined();
    expect(byPk(forward.conflicts)).toEqual(expected);
    expect(forward.conflicts.find((c) => (c.entity as Props).pk === 'mm')).toMatchObject({
      id: expect.stringMatching(/^d-\d+$/),
      entity: { kind: 'object', type: 'Order', pk: 'mm', property: 'amount' },
      base: 10,
      source: 11,
      target: 12,
      sourceAt: expect.any(String),
      targetAt: expect.any(String),
    });
    expect(forward.conflicts.find((c) => (c.entity as Props).pk === 'md')).toMatchObject({
      base: { id: 'md', amount: 10, status: 'open' },
      source: { id: 'md', amount: 11, status: 'open' },
      target: null,
    });
    // Changed in the source only (s1), independent properties (ind), added (as), deleted (del);
    // nothing for unchanged, target-only or same changes. MANUAL keeps the target's side of conflicts.
    const fwd = await items(forward.merge);
    expect(fwd).toMatchObject({
      s1: { id: 's1', amount: 11, status: 'open' },
      ind: { id: 'ind', amount: 11, status: 'paid' },
      as: { id: 'as', amount: 1 },
      del: null,
    });
    for (const pk of ['u', 't1', 'same', 'tdel', 'at', 'mm', 'md', 'dm', 'ab']) expect(fwd).not.toHaveProperty(pk);
    expect(forward.planned).toMatchObject({ service: 'data', changes: { objects: 4, links: 0 }, conflicts: 4 });

    // The other way: the target's changes go into the source, the same conflicts mirrored.
    const back = await plan({ target: w.source, source: w.target, base: w.base, strategy: 'MANUAL', dryRun: true });
    expect(byPk(back.conflicts)).toEqual(expected);
    expect(back.conflicts.find((c) => (c.entity as Props).pk === 'mm')).toMatchObject({ source: 12, target: 11 });
    const bwd = await items(back.merge);
    expect(bwd).toMatchObject({
      t1: { id: 't1', amount: 12, status: 'open' },
      ind: { id: 'ind', amount: 11, status: 'paid' },
      at: { id: 'at', amount: 2 },
      tdel: null,
    });
    for (const pk of ['u', 's1', 'same', 'del', 'as']) expect(bwd).not.toHaveProperty(pk);

    // A dry run applies nothing, even when asked.
    const res = await apply(w.target, forward.merge);
    expect(res).toMatchObject({ phase: 'apply', status: 409 });
    expect(await get(w.target, 's1')).toMatchObject({ amount: 10 });
  });

  it('SOURCE_WINS applies every change in the target, with events; verify finds no difference, then the corruption', async () => {
    const w = await sevenCases();
    const { merge, conflicts, planned } = await plan(w);
    expect(conflicts).toHaveLength(4);
    expect(planned).toMatchObject({ changes: { objects: 8, links: 0 } });
    const applied = await apply(w.target, merge);
    expect(applied).toMatchObject({ service: 'data', applied: { objects: 8, links: 0 } });
    expect(await get(w.target, 'u')).toEqual({ id: 'u', amount: 10, status: 'open' });
    expect(await get(w.target, 's1')).toEqual({ id: 's1', amount: 11, status: 'open' });
    expect(await get(w.target, 't1')).toEqual({ id: 't1', amount: 12, status: 'open' });
    expect(await get(w.target, 'mm')).toEqual({ id: 'mm', amount: 11, status: 'open' });
    expect(await get(w.target, 'ind')).toEqual({ id: 'ind', amount: 11, status: 'paid' });
    expect(await get(w.target, 'del')).toBeNull();
    expect(await get(w.target, 'tdel')).toBeNull();
    expect(await get(w.target, 'md')).toEqual({ id: 'md', amount: 11, status: 'open' });
    expect(await get(w.target, 'dm')).toBeNull();
    expect(await get(w.target, 'as')).toEqual({ id: 'as', amount: 1 });
    expect(await get(w.target, 'at')).toEqual({ id: 'at', amount: 2 });
    expect(await get(w.target, 'ab')).toEqual({ id: 'ab', amount: 1, status: 'new' });
    // Ordinary changes on onto.changes.objects, caused by the merge.
    const events = await s.records(
      'onto.changes.objects',
      (e) => e.filter((x) => (x.event.payload as Props).requestId === `merge:${merge}`).length >= 8,
    );
    const ours = events.filter((x) => (x.event.payload as Props).requestId === `merge:${merge}`).map((x) => x.event);
    expect(ours).toHaveLength(8);
    expect(ours.find((e) => (e.payload as Props).pk === 'mm')).toMatchObject({
      type: 'object.updated',
      payload: { actor: 'merger', before: { amount: 12 }, after: { amount: 11 } },
    });
    expect(ours.find((e) => (e.payload as Props).pk === 'dm')).toMatchObject({ type: 'object.deleted' });

    const verification = uuidv7();
    await send(w.target, 'world.merge.verify.requested', { merge, verification });
    const verified = async (id: string) =>
      (await replies(merge, (r) => r.some((x) => x.type === 'merge.verified' && x.payload.verification === id))).find(
        (x) => x.payload.verification === id,
      )?.payload;
    expect(await verified(verification)).toMatchObject({ checked: 8, differences: 0, sample: [] });
    await s.data.app.pg.query(
      `UPDATE object_heads SET properties = properties || '{"amount": 99}' WHERE world_id = $1 AND pk = 'mm'`,
      [w.target],
    );
    const second = uuidv7();
    await send(w.target, 'world.merge.verify.requested', { merge, verification: second });
    expect(await verified(second)).toMatchObject({
      differences: 1,
      sample: [{ entity: { pk: 'mm' }, expected: { amount: 11 }, actual: { amount: 99 } }],
    });

    // A second apply of an applied merge answers the same and writes nothing.
    const heads = await s.data.app.pg.query('SELECT max(seq) AS m FROM object_heads WHERE world_id = $1', [w.target]);
    const { version, document } = await schemaOf(w.target);
    await send(w.target, 'world.merge.apply', { merge, schemaVersion: version, schema: document });
    await replies(merge, (r) => r.filter((x) => x.type === 'merge.applied').length === 2);
    const after = await s.data.app.pg.query('SELECT max(seq) AS m FROM object_heads WHERE world_id = $1', [w.target]);
    expect(after.rows[0]).toEqual(heads.rows[0]);

    // A repeated merge with the base moved to the point merged raises nothing settled before.
    const again = await plan({
      ...w,
      base: { world: w.source, schemaVersion: 1, dataSeq: Number((planned as Props).source), definitions: 0 },
      strategy: 'MANUAL',
    });
    expect(again.conflicts).toEqual([]);
    expect(again.planned).toMatchObject({ changes: { objects: 0, links: 0 }, conflicts: 0 });
  });

  it('TARGET_WINS, TIMESTAMP_WINS with a tie broken by the greater data seq, MANUAL with resolutions', async () => {
    const w = await pair(async (t) => {
      for (const pk of ['a', 'b', 'c']) await put(t, pk, { amount: 10, status: 'open' });
    });
    await put(w.source, 'a', { amount: 11, status: 'src' }); // amount: source older, status: source older
    await put(w.target, 'a', { amount: 12, status: 'open' });
    await put(w.target, 'b', { amount: 12, status: 'open' });
    await put(w.source, 'b', { amount: 11, status: 'open' }); // the source's change is newer
    await put(w.source, 'c', { amount: 11, status: 'open' });
    await put(w.target, 'c', { amount: 12, status: 'open' });

    const tw = await plan({ ...w, strategy: 'TARGET_WINS', dryRun: true });
    expect(await items(tw.merge)).toEqual({ a: { id: 'a', amount: 12, status: 'src' } });

    // Equal instants for c's two changes: the greater data seq (the target's, written last) wins.
    await s.data.app.pg.query(
      `UPDATE object_heads SET updated_at = '2026-01-01T00:00:00Z' WHERE pk = 'c' AND world_id IN ($1, $2)`,
      [w.source, w.target],
    );
    const ts = await plan({ ...w, strategy: 'TIMESTAMP_WINS', dryRun: true });
    expect(ts.conflicts).toHaveLength(3);
    const tsItems = await items(ts.merge);
    expect(tsItems.a).toEqual({ id: 'a', amount: 12, status: 'src' });
    expect(tsItems.b).toEqual({ id: 'b', amount: 11, status: 'open' });
    expect(tsItems).not.toHaveProperty('c'); // the target kept: nothing to write
    const cConflict = ts.conflicts.find((c) => (c.entity as Props).pk === 'c') as Props;
    expect(cConflict.sourceAt).toBe(cConflict.targetAt);

    // MANUAL: open until resolved, then applied as resolved.
    const manual = await plan({ ...w, strategy: 'MANUAL' });
    const id = (pk: string) => manual.conflicts.find((c) => (c.entity as Props).pk === pk)?.id;
    expect(await apply(w.target, manual.merge)).toMatchObject({
      phase: 'apply',
      status: 409,
      field: `/conflicts/${id('a')}`,
    });
    await send(w.target, 'world.merge.conflict.resolved', { merge: manual.merge, conflict: id('a'), take: 'source' });
    await send(w.target, 'world.merge.conflict.resolved', { merge: manual.merge, conflict: id('b'), take: 'target' });
    await send(w.target, 'world.merge.conflict.resolved', {
      merge: manual.merge,
      conflict: id('c'),
      take: 'value',
      value: 42,
    });
    await send(w.target, 'world.merge.conflict.resolved', { merge: manual.merge, conflict: 'c-1', take: 'source' });
    await s.until('the resolutions recorded', async () => {
      const { rows } = await s.data.app.pg.query(
        `SELECT count(*)::int AS n FROM merge_conflicts WHERE merge_id = $1 AND resolved_by = 'person'`,
        [manual.merge],
      );
      return rows[0].n === 3 ? true : undefined;
    });
    expect(await apply(w.target, manual.merge)).toMatchObject({ applied: { objects: 2 } });
    expect(await get(w.target, 'a')).toEqual({ id: 'a', amount: 11, status: 'src' });
    expect(await get(w.target, 'b')).toEqual({ id: 'b', amount: 12, status: 'open' });
    expect(await get(w.target, 'c')).toEqual({ id: 'c', amount: 42, status: 'open' });
  });

  it('SCHEMA_CONFLICT when the merged object does not fit the merged schema; a plan that cannot be made fails', async () => {
    const w = await pair(async (t) => put(t, 'o1', { amount: 10 }));
    await put(w.source, 'o1', { amount: 10, note: 'hello' });
    const { document } = await schemaOf(w.target);
    const types = document.objectTypes as Record<string, { properties: Props }>;
    const { note: _, ...rest } = (types.Order as { properties: Props }).properties;
    const schema = { ...document, objectTypes: { ...types, Order: { ...types.Order, properties: rest } } };
    const p = await plan({ ...w, schema });
    expect(p.conflicts).toEqual([
      expect.objectContaining({
        type: 'SCHEMA_CONFLICT',
        entity: { kind: 'object', type: 'Order', pk: 'o1' },
        reason: expect.stringContaining('/properties/note'),
      }),
    ]);
    const unknown = await plan({ ...w, source: 'nowhere' });
    expect(unknown.failed).toMatchObject({ phase: 'plan', status: 404, field: '/source' });
    const future = await plan({ ...w, base: { ...w.base, dataSeq: 10 ** 12 } });
    expect(future.failed).toMatchObject({ phase: 'plan', status: 422, field: '/base/dataSeq' });
  });

  it('links: added and deleted; a missing end and a taken to-one place are conflicts', async () => {
    const w = await pair(async (t) => {
      await put(t, 'c1', {}, 'Customer');
      await put(t, 'c2', {}, 'Customer');
      for (const pk of ['o1', 'o2', 'o3', 'o4']) await put(t, pk, { amount: 1 });
      await link(t, 'c1', 'o1');
    });
    await link(w.source, 'c1', 'o1', 'DELETE'); // deleted in the source
    await link(w.source, 'c1', 'o2'); // added in the source
    await link(w.source, 'c1', 'o3'); // added, but its end is deleted in the target
    await del(w.target, 'o3');
    await link(w.source, 'c1', 'o4'); // o4 has one customer: the target gave it c2
    await link(w.target, 'c2', 'o4');
    const p = await plan(w);
    expect(byPk(p.conflicts)).toEqual({ 'c1->o3': 'MODIFY_DELETE', 'c1->o4': 'MODIFY_MODIFY' });
    expect(p.conflicts.find((c) => (c.entity as Props).linkType)).toMatchObject({
      entity: {
        kind: 'link',
        linkType: 'placed',
        from: { type: 'Customer', pk: 'c1' },
        to: { type: 'Order', pk: 'o3' },
      },
      reason: expect.stringContaining('absent in the merged result'),
    });
    expect(await apply(w.target, p.merge)).toMatchObject({ applied: { objects: 0, links: 2 } });
    const linked = await s.dataCall('GET', `/v1/worlds/${w.target}/objects/Customer/c1/links/placed`);
    expect(linked.json().links.map((l: { pk: string }) => l.pk)).toEqual(['o2']);
  });

  it('a link made in the target since the plan to an object the merge deletes fails the apply 409: no link outlives its end', async () => {
    const w = await pair(async (t) => {
      await put(t, 'c1', {}, 'Customer');
      for (const pk of ['o1', 'o2']) await put(t, pk, { amount: 1 });
    });
    await del(w.source, 'o1'); // the merge deletes o1 in the target
    await put(w.source, 'o2', { amount: 2 });
    const p = await plan(w);
    expect(p.conflicts).toEqual([]);
    await link(w.target, 'c1', 'o1'); // made after the plan: the plan never saw it
    expect(await apply(w.target, p.merge)).toMatchObject({
      phase: 'apply',
      status: 409,
      reason: expect.stringContaining('which the merge deletes'),
    });
    expect(await get(w.target, 'o1')).toEqual({ id: 'o1', amount: 1 });
    expect(await get(w.target, 'o2')).toEqual({ id: 'o2', amount: 1 });
    // Planned again, the link is a conflict of its own; without it the merge goes through.
    await link(w.target, 'c1', 'o1', 'DELETE');
    const again = await plan(w);
    expect(await apply(w.target, again.merge)).toMatchObject({ applied: { objects: 2 } });
    expect(await get(w.target, 'o1')).toBeNull();
  });

  it('409 when the target moved since the plan (nothing applied); an unrelated target write is kept; compensation restores', async () => {
    const w = await pair(async (t) => {
      for (const pk of ['o1', 'o2', 'o3']) await put(t, pk, { amount: 1 });
    });
    for (const pk of ['o1', 'o2']) await put(w.source, pk, { amount: 2 });
    const moved = await plan(w);
    await put(w.target, 'o2', { amount: 3 });
    const failed = await apply(w.target, moved.merge);
    expect(failed).toMatchObject({ phase: 'apply', status: 409, reason: expect.stringContaining('Order o2') });
    expect(await get(w.target, 'o1')).toEqual({ id: 'o1', amount: 1 });

    await put(w.target, 'o2', { amount: 1 }); // back as it was: o2 unchanged in the target again
    const good = await plan(w);
    await put(w.target, 'o3', { amount: 7 }); // unrelated to the merge
    expect(await apply(w.target, good.merge)).toMatchObject({ applied: { objects: 2 } });
    expect(await get(w.target, 'o1')).toEqual({ id: 'o1', amount: 2 });
    expect(await get(w.target, 'o3')).toEqual({ id: 'o3', amount: 7 });

    await put(w.target, 'o2', { amount: 5 }); // written after the merge: not reverted
    await send(w.target, 'world.merge.compensate', { merge: good.merge, reason: 'intelligence failed' });
    const r = await replies(good.merge, ended(['merge.compensated']));
    expect(r.find((x) => x.type === 'merge.compensated')?.payload).toMatchObject({
      reverted: { objects: 1, links: 0 },
      notReverted: [{ kind: 'object', type: 'Order', pk: 'o2' }],
    });
    expect(await get(w.target, 'o1')).toEqual({ id: 'o1', amount: 1 });
    expect(await get(w.target, 'o2')).toEqual({ id: 'o2', amount: 5 });
    expect(await get(w.target, 'o3')).toEqual({ id: 'o3', amount: 7 });

    // Compensated before the apply: the late apply does nothing.
    const early = await plan({ ...w, strategy: 'SOURCE_WINS' });
    await send(w.target, 'world.merge.compensate', { merge: early.merge, reason: 'control failed' });
    await replies(early.merge, ended(['merge.compensated']));
    const { version, document } = await schemaOf(w.target);
    await send(w.target, 'world.merge.apply', { merge: early.merge, schemaVersion: version, schema: document });

    // A merge data never planned (its plan failed): nothing to undo, answered all the same. Sent
    // after the late apply on the same world's partition, its reply is also the sentinel that the
    // apply was consumed: no wait for a time that a slow apply could outlast.
    const unknown = uuidv7();
    await send(w.target, 'world.merge.compensate', { merge: unknown, reason: 'the plan failed' });
    const none = await replies(unknown, ended(['merge.compensated']));
    expect(none[0]?.payload).toMatchObject({ reverted: { objects: 0, links: 0 }, notReverted: [] });
    expect(await get(w.target, 'o1')).toEqual({ id: 'o1', amount: 1 });
    expect((await replies(early.merge, ended(['merge.compensated']))).map((x) => x.type)).not.toContain(
      'merge.applied',
    );
  });
});
