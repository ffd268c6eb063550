import { emptySchema, type SchemaDocument } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import { compile, evaluate, evaluateCondition, propertiesToCel } from '../src/cel/expressions.js';
import { type DerivedInput, derivedInputs, resolveDerived, topologicalOrder } from '../src/derived/model.js';
import { resolveRule } from '../src/rules/model.js';

const schema: SchemaDocument = {
  ...emptySchema(),
  objectTypes: {
    Customer: {
      apiName: 'Customer',
      displayName: 'Customer',
      primaryKey: 'id',
      properties: {
        id: { type: 'string', required: true },
        limit: { type: 'integer' },
        rate: { type: 'double' },
        tags: { type: { type: 'array', items: 'integer' } },
      },
    },
    Order: {
      apiName: 'Order',
      displayName: 'Order',
      primaryKey: 'id',
      properties: { id: { type: 'string', required: true }, amount: { type: 'integer' }, note: { type: 'string' } },
    },
    Person: {
      apiName: 'Person',
      displayName: 'Person',
      primaryKey: 'id',
      properties: { id: { type: 'string', required: true }, age: { type: 'integer' } },
    },
  },
  linkTypes: {
    placed: { apiName: 'placed', from: 'Customer', to: 'Order', cardinality: 'ONE_TO_MANY' },
    knows: { apiName: 'knows', from: 'Person', to: 'Person', cardinality: 'MANY_TO_MANY' },
  },
};

const input = (over: Partial<DerivedInput>): DerivedInput => ({
  objectType: 'Customer',
  expression: 'self.limit',
  aggregates: {},
  maxStalenessMs: 1000,
  ...over,
});
const resolve = (name: string, over: Partial<DerivedInput>, others = new Map()) =>
  resolveDerived(name, input(over), { version: 1, validSince: '' }, schema, others);

describe('CEL expressions', () => {
  it('records what an expression reads, through macros and index syntax', () => {
    const c = compile("self.limit > 0 && self.tags.all(t, t > 0) && has(self.rate) && derived['x'] == agg.n", [
      'self',
      'derived',
      'agg',
    ]);
    expect(c.ok).toBe(true);
    if (!c.ok) return;
    expect([...c.refs.self].sort()).toEqual(['limit', 'rate', 'tags']);
    expect([...c.refs.derived]).toEqual(['x']);
    expect([...c.refs.agg]).toEqual(['n']);
  });

  it('refuses syntax errors, unknown identifiers and functions, roots not offered', () => {
    expect(compile('self.limit +', ['self'])).toMatchObject({ ok: false, message: /not valid CEL/ });
    expect(compile('foo.bar', ['derived'])).toMatchObject({ ok: false, message: /unknown identifier foo/ });
    expect(compile('frobnicate(self.limit)', ['self'])).toMatchObject({ ok: false, message: /unknown function/ });
    expect(compile('agg.n', ['self', 'derived'])).toMatchObject({ ok: false, message: /agg is not available/ });
    expect(compile('self', ['self'])).toMatchObject({ ok: false, message: /must be followed by a name/ });
    expect(compile('self[self.limit]', ['self'])).toMatchObject({ ok: false, message: /string literal/ });
  });

  it('sees integers as ints and doubles as doubles, and stores what it computes as JSON', () => {
    const self = propertiesToCel({ limit: 3, rate: 2, tags: [1, 2] }, schema.objectTypes.Customer?.properties);
    const run = (source: string) => {
      const c = compile(source, ['self']);
      if (!c.ok) throw new Error(c.message);
      return evaluate(c.program, { self });
    };
    expect(run('self.limit + 1')).toEqual({ value: 4, kind: 'int' });
    // A bare name is the property; loop variables and the roots are not.
    expect(run('limit * 2 + self.limit')).toEqual({ value: 9, kind: 'int' });
    expect(run('tags.map(limit, limit * 10)')).toEqual({ value: [10, 20], kind: 'list' });
    expect(run('self.rate * 1.5')).toEqual({ value: 3, kind: 'double' });
    expect(run('self.tags.map(t, t * 2)')).toEqual({ value: [2, 4], kind: 'list' });
    expect(run('{"a": self.limit}')).toEqual({ value: { a: 3 }, kind: 'map' });
    expect(run('self.limit / 0')).toEqual({ error: expect.stringMatching(/divide by zero/) });
    expect(run('self.missing')).toHaveProperty('error');
    expect(run('self.limit + self.rate')).toHaveProperty('error');
    expect(run('9223372036854775807')).toEqual({ error: expect.stringMatching(/2\^53/) });
    expect(run('timestamp("2024-01-02T03:04:05Z")')).toEqual({ value: '2024-01-02T03:04:05.000Z', kind: 'timestamp' });
    const cond = compile('self.limit', ['self']);
    if (!cond.ok) throw new Error(cond.message);
    expect(evaluateCondition(cond.program, { self })).toEqual({ error: expect.stringMatching(/not a bool/) });
  });
});

describe('derived definitions', () => {
  it('resolves aggregates: the direction from the link type, the kind of number from the property', () => {
    const r = resolve('total', {
      expression: 'agg.sum + agg.n',
      aggregates: {
        sum: { function: 'sum', linkType: 'placed', property: 'amount' },
        n: { function: 'count', linkType: 'placed' },
      },
    });
    expect(r.errors).toEqual([]);
    expect(r.resolved?.aggregates).toMatchObject([
      { alias: 'sum', direction: 'out', targetType: 'Order', numeric: 'int' },
      { alias: 'n', direction: 'out', targetType: 'Order' },
    ]);
    const back = resolveDerived(
      'spend',
      input({
        objectType: 'Order',
        expression: 'agg.c',
        aggregates: { c: { function: 'avg', linkType: 'placed', property: 'limit' } },
      }),
      { version: 1, validSince: '' },
      schema,
      new Map(),
    );
    expect(back.resolved?.aggregates[0]).toMatchObject({ direction: 'in', targetType: 'Customer', numeric: 'double' });
  });

  it('names the path of every unknown reference', () => {
    expect(resolve('x', { objectType: 'Nope' }).errors).toContainEqual({
      path: '/objectType',
      message: expect.stringMatching(/Nope/),
    });
    expect(resolve('x', { expression: 'self.nope' }).errors).toEqual([
      { path: '/expression', message: 'self.nope: Customer has no property nope' },
    ]);
    expect(resolve('x', { expression: 'limt + 1' }).errors).toEqual([
      { path: '/expression', message: 'limt: Customer has no property limt' },
    ]);
    expect(resolve('x', { expression: 'derived.y' }).errors).toEqual([
      { path: '/expression', message: 'derived.y: derived property y is not defined' },
    ]);
    const errs = resolve('x', {
      expression: 'agg.a + agg.b + agg.c + agg.d + agg.e',
      aggregates: {
        a: { function: 'sum', linkType: 'nope', property: 'amount' },
        b: { function: 'sum', linkType: 'placed', property: 'nope' },
        c: { function: 'sum', linkType: 'placed', property: 'note' },
        d: { function: 'count', linkType: 'knows' },
        e: { function: 'sum', linkType: 'placed' },
      },
    }).errors.map((e) => e.path);
    expect(errs).toEqual([
      '/aggregates/a/linkType',
      '/aggregates/b/property',
      '/aggregates/c/property',
      '/aggregates/d/linkType',
      '/aggregates/e',
    ]);
    const self = resolveDerived(
      'x',
      input({ objectType: 'Person', expression: 'agg.n', aggregates: { n: { function: 'count', linkType: 'knows' } } }),
      { version: 1, validSince: '' },
      schema,
      new Map(),
    );
    expect(self.errors).toEqual([{ path: '/aggregates/n/direction', message: expect.stringMatching(/itself/) }]);
  });

  it('orders definitions by what they read and finds cycles with their path', () => {
    const defs = [
      { name: 'c', inputs: ['b'] },
      { name: 'a', inputs: [] },
      { name: 'b', inputs: ['a'] },
    ];
    const ordered = topologicalOrder(defs, (d) => d.inputs);
    expect('order' in ordered && ordered.order.map((d) => d.name)).toEqual(['a', 'b', 'c']);
    const cyclic = topologicalOrder(
      [
        { name: 'a', inputs: ['b'] },
        { name: 'b', inputs: ['a'] },
      ],
      (d) => d.inputs,
    );
    expect(cyclic).toEqual({ cycle: ['a', 'b', 'a'] });
    const r = resolve(
      't',
      {
        expression: 'derived.x + agg.s',
        aggregates: { s: { function: 'sum', linkType: 'placed', derived: 'y' } },
      },
      new Map([
        ['x', { objectType: 'Customer', state: 'valid' }],
        ['y', { objectType: 'Order', state: 'valid' }],
      ]),
    );
    expect(r.resolved && derivedInputs(r.resolved)).toEqual(['x', 'y']);
  });

  it('checks rules against the object type and its derived properties', () => {
    const derived = new Map([['total', { objectType: 'Order', state: 'valid' as const }]]);
    const ok = resolveRule(
      'r',
      { objectType: 'Customer', condition: 'self.limit > 3', alertType: 'a', severity: 'info' },
      1,
      schema,
      derived,
    );
    expect(ok.errors).toEqual([]);
    const bad = resolveRule(
      'r',
      { objectType: 'Customer', condition: 'derived.total > self.nope', alertType: 'a', severity: 'info' },
      1,
      schema,
      derived,
    );
    expect(bad.errors.map((e) => e.message)).toEqual([
      'self.nope: Customer has no property nope',
      'derived.total: total is on Order, not Customer',
    ]);
  });
});
