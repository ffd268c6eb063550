import { describe, expect, it } from 'vitest';
import { type History, mergeSchemas, type Strategy, withValue } from '../src/merges/schema-merge.js';
import type { SchemaDocument } from '../src/schema/model.js';

const order = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  apiName: 'Order',
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, ...properties },
  ...extra,
});
const doc = (objectTypes: Record<string, unknown> = {}, linkTypes: Record<string, unknown> = {}): SchemaDocument =>
  ({ objectTypes, linkTypes, actionTypes: {} }) as SchemaDocument;
const merge = (base: SchemaDocument, source: SchemaDocument, target: SchemaDocument, strategy: Strategy = 'MANUAL') =>
  mergeSchemas({ base, source, target, strategy });
const props = (d: SchemaDocument) =>
  (d.objectTypes.Order as { properties: Record<string, unknown> } | undefined)?.properties;

const base = doc({ Order: order({ amount: { type: 'integer' }, note: { type: 'string' } }) });

describe('schema three-way merge: the seven cases per property, both directions', () => {
  const changed = { type: 'double' };
  const other = { type: 'string', description: 'other' };
  const cases: {
    name: string;
    source: Record<string, unknown> | null;
    target: Record<string, unknown> | null;
    want: unknown;
    conflict: boolean;
  }[] = [
    {
      name: 'unchanged',
      source: { type: 'integer' },
      target: { type: 'integer' },
      want: { type: 'integer' },
      conflict: false,
    },
    { name: 'taken from the source', source: changed, target: { type: 'integer' }, want: changed, conflict: false },
    { name: 'kept from the target', source: { type: 'integer' }, target: changed, want: changed, conflict: false },
    { name: 'changed alike', source: changed, target: changed, want: changed, conflict: false },
    { name: 'changed differently', source: changed, target: other, want: other, conflict: true },
    { name: 'deleted in the source', source: null, target: { type: 'integer' }, want: undefined, conflict: false },
    { name: 'deleted in the target', source: { type: 'integer' }, target: null, want: undefined, conflict: false },
    {
      name: 'modified in the source, deleted in the target',
      source: changed,
      target: null,
      want: undefined,
      conflict: true,
    },
    {
      name: 'deleted in the source, modified in the target',
      source: null,
      target: changed,
      want: changed,
      conflict: true,
    },
  ];
  const withAmount = (v: Record<string, unknown> | null) =>
    doc({ Order: order(v ? { amount: v, note: { type: 'string' } } : { note: { type: 'string' } }) });

  for (const c of cases) {
    it(`${c.name} (MANUAL keeps the target's side of a conflict)`, () => {
      const r = merge(base, withAmount(c.source), withAmount(c.target));
      expect(props(r.document)?.amount).toEqual(c.want);
      expect(props(r.document)?.note).toEqual({ type: 'string' });
      expect(r.conflicts.map((x) => x.entity)).toEqual(
        c.conflict ? [{ kind: 'objectType', apiName: 'Order', property: 'amount' }] : [],
      );
      if (c.conflict) expect(r.conflicts[0]).toMatchObject({ id: 'c-1', type: 'SCHEMA_CONFLICT', needsPerson: false });
      if (c.conflict) expect(r.conflicts[0]?.take).toBeUndefined();
    });
  }

  it('an addition in the source is taken; added on both sides alike is no conflict', () => {
    const s = doc({ Order: order({ amount: { type: 'integer' }, note: { type: 'string' }, vat: { type: 'double' } }) });
    expect(props(merge(base, s, base).document)?.vat).toEqual({ type: 'double' });
    expect(merge(base, s, s).conflicts).toEqual([]);
  });

  it('two sides changing different properties of one type is no conflict', () => {
    const s = doc({ Order: order({ amount: { type: 'double' }, note: { type: 'string' } }) });
    const t = doc({ Order: order({ amount: { type: 'integer' }, note: { type: 'string', description: 'n' } }) });
    const r = merge(base, s, t);
    expect(r.conflicts).toEqual([]);
    expect(props(r.document)).toMatchObject({ amount: { type: 'double' }, note: { type: 'string', description: 'n' } });
  });

  it('a top-level field changed differently conflicts by field; a type added and deleted by type', () => {
    const s = doc({
      Order: order({ amount: { type: 'integer' }, note: { type: 'string' } }, { displayName: 'Orders' }),
    });
    const t = doc({
      Order: order({ amount: { type: 'integer' }, note: { type: 'string' } }, { displayName: 'Commande' }),
    });
    expect(merge(base, s, t).conflicts.map((c) => c.entity)).toEqual([
      { kind: 'objectType', apiName: 'Order', field: 'displayName' },
    ]);
    // Modified in the source, deleted in the target: the whole type.
    const deleted = merge(base, s, doc());
    expect(deleted.conflicts.map((c) => [c.entity, c.reason])).toEqual([
      [{ kind: 'objectType', apiName: 'Order' }, 'changed in the source, deleted in the target'],
    ]);
    expect(deleted.document.objectTypes.Order).toBeUndefined();
    // And the other way round.
    expect(merge(base, doc(), t).conflicts[0]?.reason).toBe('deleted in the source, changed in the target');
  });

  it('SOURCE_WINS and TARGET_WINS settle every conflict', () => {
    const s = doc({ Order: order({ amount: { type: 'double' }, note: { type: 'string' } }) });
    const t = doc({ Order: order({ amount: { type: 'string' }, note: { type: 'string' } }) });
    const sw = merge(base, s, t, 'SOURCE_WINS');
    expect(props(sw.document)?.amount).toEqual({ type: 'double' });
    expect(sw.conflicts[0]?.take).toBe('source');
    const tw = merge(base, s, t, 'TARGET_WINS');
    expect(props(tw.document)?.amount).toEqual({ type: 'string' });
    expect(tw.conflicts[0]?.take).toBe('target');
  });

  it('TIMESTAMP_WINS takes the newer change per property, and the source on a tie', () => {
    const s = doc({ Order: order({ amount: { type: 'double' }, note: { type: 'integer' } }) });
    const t = doc({ Order: order({ amount: { type: 'string' }, note: { type: 'boolean' } }) });
    const history = (d: SchemaDocument, at: string, noteAt: string): History => [
      { createdAt: '2026-01-01T00:00:00Z', document: base },
      // amount changes at `at`, note at `noteAt` (two versions when they differ)
      ...(at < noteAt
        ? [
            {
              createdAt: at,
              document: withValue(base, { kind: 'objectType', apiName: 'Order', property: 'amount' }, props(d)?.amount),
            },
            { createdAt: noteAt, document: d },
          ]
        : [{ createdAt: at, document: d }]),
    ];
    const r = mergeSchemas({
      base,
      source: s,
      target: t,
      strategy: 'TIMESTAMP_WINS',
      sourceHistory: history(s, '2026-01-02T00:00:00Z', '2026-01-05T00:00:00Z'),
      targetHistory: history(t, '2026-01-03T00:00:00Z', '2026-01-03T00:00:00Z'),
    });
    // amount: target's change (3rd) is newer than the source's (2nd); note: source's (5th) newer.
    expect(props(r.document)).toMatchObject({ amount: { type: 'string' }, note: { type: 'integer' } });
    expect(r.conflicts.map((c) => [c.entity.property, c.take, c.sourceAt, c.targetAt])).toEqual([
      ['amount', 'target', '2026-01-02T00:00:00Z', '2026-01-03T00:00:00Z'],
      ['note', 'source', '2026-01-05T00:00:00Z', '2026-01-03T00:00:00Z'],
    ]);
    const tie = mergeSchemas({
      base,
      source: s,
      target: t,
      strategy: 'TIMESTAMP_WINS',
      sourceHistory: history(s, '2026-01-03T00:00:00Z', '2026-01-03T00:00:00Z'),
      targetHistory: history(t, '2026-01-03T00:00:00Z', '2026-01-03T00:00:00Z'),
    });
    expect(tie.conflicts.map((c) => c.take)).toEqual(['source', 'source']);
  });

  it('a merged document that fails validation is a conflict no strategy settles, keeping the target side', () => {
    const customer = {
      apiName: 'Customer',
      displayName: 'Customer',
      primaryKey: 'id',
      properties: { id: { type: 'string' } },
    };
    const link = { apiName: 'placedBy', from: 'Order', to: 'Customer', cardinality: 'MANY_TO_ONE' };
    const b = doc({ Order: base.objectTypes.Order, Customer: customer });
    // The source deletes Customer; the target adds a link to it.
    const s = doc({ Order: base.objectTypes.Order });
    const t = doc({ Order: base.objectTypes.Order, Customer: customer }, { placedBy: link });
    const r = merge(b, s, t, 'SOURCE_WINS');
    expect(r.conflicts).toHaveLength(1);
    expect(r.conflicts[0]).toMatchObject({
      entity: { kind: 'linkType', apiName: 'placedBy' },
      needsPerson: true,
    });
    expect(r.conflicts[0]?.reason).toMatch(
      /the merged link type placedBy is invalid: \/to object type "Customer" does not exist/,
    );
    expect(r.conflicts[0]?.take).toBeUndefined();
  });

  it('everything in the source is an addition against an empty base', () => {
    const s = doc({ Order: order({}) });
    const r = merge(doc(), s, doc());
    expect(r.conflicts).toEqual([]);
    expect(r.document.objectTypes.Order).toEqual(order({}));
  });
});
