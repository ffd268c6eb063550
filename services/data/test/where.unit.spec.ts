import type { SchemaDocument } from '@onto/shared';
import {
  afterSql,
  compileWhere,
  indexedAccess,
  parseGroupBy,
  parseMetrics,
  parseOrderBy,
  parseWhere,
  pivot,
  QUERY_LIMITS,
  QueryFaults,
  type SqlContext,
  textTerms,
  type WhereNode,
} from '@onto/shared';
import { describe, expect, it } from 'vitest';

const doc: SchemaDocument = {
  objectTypes: {
    Customer: {
      apiName: 'Customer',
      displayName: 'Customer',
      primaryKey: 'id',
      properties: {
        id: { type: 'string', required: true },
        name: { type: 'string', indexed: true },
        note: { type: 'string' },
        tags: { type: { type: 'array', items: 'string' }, indexed: true },
        score: { type: 'double' },
        joined: { type: 'date' },
        seen: { type: 'timestamp' },
        address: { type: { type: 'struct', fields: { city: 'string' } } },
        temp: { type: { type: 'series', value: 'double' } },
      },
    },
    Order: {
      apiName: 'Order',
      displayName: 'Order',
      primaryKey: 'n',
      properties: { n: { type: 'integer', required: true }, amount: { type: 'integer', indexed: true } },
    },
  },
  linkTypes: { placed: { apiName: 'placed', from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' } },
  actionTypes: {},
};
const Customer = doc.objectTypes.Customer as NonNullable<SchemaDocument['objectTypes'][string]>;
const Order = doc.objectTypes.Order as NonNullable<SchemaDocument['objectTypes'][string]>;

/** A context that records parameters and writes links as a readable marker. */
function context() {
  const params: unknown[] = [];
  const ctx: SqlContext = {
    param: (v) => {
      params.push(v);
      return `$${params.length}`;
    },
    linkExists: (link, outer, inner) => `LINK(${link.linkType},${link.side},${outer}.pk,${inner('o')})`,
  };
  return { ctx, params };
}

const faultsOf = (where: unknown, type = Customer) => {
  const faults = new QueryFaults();
  parseWhere(doc, type, where, 'body/where', faults);
  return faults.list;
};

describe('where-clauses', () => {
  it('compiles each operator to parameterised SQL, values typed as stored', () => {
    const { ctx, params } = context();
    const node = parseWhere(doc, Customer, {
      $and: [
        { name: { $in: ['a', 'b'] }, score: { $gt: 1.5 } },
        { $or: [{ seen: { $gte: '2026-01-01T00:00:00+01:00' } }, { note: { $isNull: true } }] },
        { $not: { tags: { $contains: 'red' } } },
        { id: { $startsWith: 'c1' } },
        { note: { $containsAnyTerm: "Rock'n roll" } },
      ],
    }) as WhereNode;
    const sql = compileWhere(node, ctx);
    expect(sql).toBe(
      "(((r.properties -> $1::text) = ANY($2::jsonb[]) AND ((r.properties -> $3::text) > $4::jsonb AND jsonb_typeof((r.properties -> $3::text)) = $5)) AND (((r.properties -> $6::text) >= $7::jsonb AND jsonb_typeof((r.properties -> $6::text)) = $8) OR (r.properties -> $9::text) IS NULL) AND NOT coalesce((r.properties -> $10::text) @> $11::jsonb, false) AND starts_with(r.pk, $12) AND to_tsvector('simple'::regconfig, r.properties ->> $13::text) @@ to_tsquery('simple'::regconfig, $14))",
    );
    expect(params).toEqual([
      'name',
      ['"a"', '"b"'],
      'score',
      '1.5',
      'number',
      'seen',
      // The instant normalised to UTC milliseconds, as stored.
      '"2025-12-31T23:00:00.000Z"',
      'string',
      'note',
      'tags',
      '["red"]',
      'c1',
      'note',
      "'rock' | 'n' | 'roll'",
    ]);
  });

  it('reads an integer primary key as its text for equality and a bare value as $eq', () => {
    const { ctx, params } = context();
    expect(compileWhere(parseWhere(doc, Order, { n: 5 }), ctx)).toBe('r.pk = $1');
    expect(compileWhere(parseWhere(doc, Order, { n: { $in: [1, 2] } }), ctx)).toBe('r.pk = ANY($2::text[])');
    expect(params).toEqual(['5', ['1', '2']]);
  });

  it('compiles link predicates through the caller, and pivots as reversed links', () => {
    const { ctx } = context();
    const node = parseWhere(doc, Customer, { $link: { type: 'placed', where: { amount: { $lt: 3 } } } });
    expect(compileWhere(node, ctx)).toMatch(/^LINK\(placed,from,r\.pk,\(\(o\.properties -> \$1::text\) < \$2::jsonb/);
    const faults = new QueryFaults();
    const pivoted = pivot(doc, Customer, parseWhere(doc, Customer, { name: 'x' }), ['placed'], faults);
    expect(faults.list).toEqual([]);
    expect(pivoted?.type.apiName).toBe('Order');
    expect(pivoted?.where).toMatchObject({ kind: 'link', linkType: 'placed', side: 'to', target: 'Customer' });
  });

  it('names the JSON path and the rule of every fault', () => {
    expect(faultsOf({ $and: [{ name: 'x' }, { price: { $gt: 1 } }] })).toEqual([
      { path: 'body/where/$and/1/price', message: 'is not a property of Customer' },
    ]);
    expect(faultsOf({ $and: [{ name: 'x' }, { score: { $gt: 'high' } }] })).toEqual([
      { path: 'body/where/$and/1/score/$gt', message: 'must be a number' },
    ]);
    expect(faultsOf({ score: { $like: 1 } })[0]?.path).toBe('body/where/score/$like');
    expect(faultsOf({ $xor: [] })[0]?.path).toBe('body/where/$xor');
    expect(faultsOf({ $link: { type: 'owns' } })[0]).toEqual({
      path: 'body/where/$link/type',
      message: '"owns" is not a link type of the schema',
    });
    expect(faultsOf({ amount: 1.5 }, Order)[0]).toEqual({ path: 'body/where/amount', message: 'must be an integer' });
    expect(faultsOf({ address: { $eq: 'x' } })[0]?.message).toMatch(/struct properties take \$isNull only/);
    expect(faultsOf({ tags: { $gt: 'a' } })[0]?.message).toMatch(/no order/);
    expect(faultsOf({ temp: { $gt: 1 } })[0]?.message).toMatch(/time series/);
    expect(faultsOf({ joined: { $eq: '2025-02-30' } })[0]?.path).toBe('body/where/joined/$eq');
    expect(faultsOf({ note: { $containsAllTerms: '--' } })[0]?.message).toMatch(/at least one term/);
    expect(faultsOf({ name: { $in: [] } })[0]?.message).toMatch(/1 to 1000/);
  });

  it('bounds nesting and the number of conditions', () => {
    let deep: unknown = { name: 'x' };
    for (let i = 0; i < QUERY_LIMITS.depth; i++) deep = { $not: deep };
    expect(faultsOf(deep)[0]?.message).toMatch(/deeper than 16/);
    let ok: unknown = { name: 'x' };
    for (let i = 0; i < QUERY_LIMITS.depth - 1; i++) ok = { $not: ok };
    expect(faultsOf(ok)).toEqual([]);
    const many = { $or: Array.from({ length: QUERY_LIMITS.terms + 1 }, () => ({ name: 'x' })) };
    expect(faultsOf(many)).toEqual([{ path: 'body/where', message: 'has 201 conditions; at most 200' }]);
    expect(faultsOf({ $or: Array.from({ length: QUERY_LIMITS.terms }, () => ({ name: 'x' })) })).toEqual([]);
  });

  it('treats an empty clause as true, and its negation as false', () => {
    const { ctx } = context();
    expect(compileWhere(parseWhere(doc, Customer, {}), ctx)).toBe('true');
    expect(compileWhere(parseWhere(doc, Customer, { $not: {} }), ctx)).toBe('false');
    expect(compileWhere(parseWhere(doc, Customer, { $or: [{}, { name: 'x' }] }), ctx)).toBe('true');
  });

  it('says whether an index narrows the rows, and which property to index otherwise', () => {
    const access = (w: unknown) => indexedAccess(parseWhere(doc, Customer, w));
    expect(access({ name: 'x', note: 'y' })).toEqual({ indexed: true });
    expect(access({ id: { $in: ['a'] } })).toEqual({ indexed: true });
    expect(access({ tags: { $contains: 'a' } })).toEqual({ indexed: true });
    expect(access({ note: 'y' })).toEqual({ indexed: false, property: 'note', path: 'body/where/note' });
    expect(access({ $or: [{ name: 'x' }, { note: 'y' }] })).toMatchObject({ indexed: false, property: 'note' });
    expect(access({ name: { $ne: 'x' } })).toMatchObject({ indexed: false, property: 'name' });
    expect(access({ $not: { name: 'x' } })).toMatchObject({ indexed: false });
    expect(access({ $link: { type: 'placed', where: { amount: 3 } } })).toEqual({ indexed: true });
  });

  it('splits full-text terms as the simple configuration does', () => {
    expect(textTerms("Foo-bar  BAZ, l'été 42")).toEqual(['foo', 'bar', 'baz', 'l', 'été', '42']);
  });
});

describe('order, pages and aggregations', () => {
  it('ends every order with the primary key and pages after the last keys, nulls last ascending', () => {
    const faults = new QueryFaults();
    const keys = parseOrderBy(Customer, [{ property: 'score', direction: 'desc' }, { property: 'name' }], faults);
    expect(keys.map((k) => [k.property, k.descending, k.pkColumn])).toEqual([
      ['score', true, false],
      ['name', false, false],
      ['id', true, true],
    ]);
    const { ctx, params } = context();
    const exprs = ['S', 'N', 'r.pk'];
    expect(afterSql(keys, exprs, [2.5, null, 'c9'], ctx)).toBe(
      '(S < $1::jsonb OR (S = $1::jsonb AND N IS NULL AND r.pk < $2::text))',
    );
    expect(params).toEqual(['2.5', 'c9']);
    expect(afterSql(keys, exprs, [null, 'x', 'c9'], context().ctx)).toBe(
      '(S IS NOT NULL OR (S IS NULL AND (N > $1::jsonb OR N IS NULL)) OR (S IS NULL AND N = $1::jsonb AND r.pk < $2::text))',
    );
    expect(parseOrderBy(Customer, [{ property: 'tags' }], faults)).toHaveLength(1);
    expect(faults.list).toEqual([{ path: 'body/orderBy/0/property', message: 'tags is a array: it has no order' }]);
  });

  it('checks groupings and metrics against the property types', () => {
    const faults = new QueryFaults();
    parseGroupBy(
      Customer,
      [
        { property: 'address', type: 'exact' },
        { property: 'name', type: 'ranges', ranges: [{ from: 1 }] },
        { property: 'score', type: 'ranges', ranges: [{ from: 5, to: 1 }] },
        { property: 'score', type: 'bucket', interval: 'day' },
        { property: 'seen', type: 'bucket', interval: 'fortnight' },
      ],
      faults,
    );
    parseMetrics(
      Customer,
      [
        { name: 'a', op: 'sum', property: 'name' },
        { name: 'b', op: 'max' },
        { name: 'a', op: 'count' },
      ],
      faults,
    );
    expect(faults.list.map((f) => f.path)).toEqual([
      'body/groupBy',
      'body/metrics/0/property',
      'body/metrics/1/property',
      'body/metrics/2/name',
    ]);
    const three = new QueryFaults();
    const groups = parseGroupBy(
      Customer,
      [
        { property: 'address', type: 'exact' },
        { property: 'name', type: 'ranges', ranges: [{ from: 1 }] },
        { property: 'score', type: 'ranges', ranges: [{ from: 5, to: 1 }] },
      ],
      three,
    );
    expect(groups).toEqual([]);
    expect(three.list.map((f) => f.path)).toEqual([
      'body/groupBy/0/property',
      'body/groupBy/1/property',
      'body/groupBy/2/ranges/0',
    ]);
  });
});
