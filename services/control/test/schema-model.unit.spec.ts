import { describe, expect, it } from 'vitest';
import {
  checkActionType,
  checkLinkType,
  checkObjectType,
  diffSchemas,
  emptySchema,
  type ObjectType,
  type SchemaDocument,
  usesOf,
} from '../src/schema/model.js';

const order: ObjectType = {
  apiName: 'Order',
  displayName: 'Order',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    amount: { type: 'integer', indexed: true },
    status: { type: { type: 'enum', values: ['open', 'shipped'] } },
    lines: { type: { type: 'array', items: { type: 'struct', fields: { sku: 'string', qty: 'integer' } } } },
    where: { type: 'geopoint' },
  },
};
const customer: ObjectType = {
  apiName: 'Customer',
  displayName: 'Customer',
  primaryKey: 'id',
  properties: { id: { type: 'string' } },
};
const schema = (): SchemaDocument => ({
  objectTypes: { Order: order, Customer: customer },
  linkTypes: { placedBy: { apiName: 'placedBy', from: 'Order', to: 'Customer', cardinality: 'ONE_TO_MANY' } },
  actionTypes: {
    ship: {
      apiName: 'ship',
      parameters: { order: { type: 'string', required: true } },
      edits: [
        { op: 'modifyObject', objectType: 'Order', pk: { param: 'order' }, values: { status: { value: 'shipped' } } },
      ],
    },
  },
});
const paths = (errors: { path: string }[]) => errors.map((e) => e.path);

describe('object types', () => {
  it('accepts every property type, nested', () => {
    expect(checkObjectType(order, 'Order')).toEqual([]);
  });

  it.each([
    ['/properties/x/type', { x: { type: 'money' } }],
    ['/properties/x/type/type', { x: { type: { type: 'map' } } }],
    ['/properties/x/type/values', { x: { type: { type: 'enum', values: [] } } }],
    ['/properties/x/type/values', { x: { type: { type: 'enum', values: ['a', 'a'] } } }],
    ['/properties/x/type/items', { x: { type: { type: 'array', items: 'color' } } }],
    ['/properties/x/type/fields/a b', { x: { type: { type: 'struct', fields: { 'a b': 'string' } } } }],
    ['/properties/9lives', { '9lives': { type: 'string' } }],
    ['/properties/x/required', { x: { type: 'string', required: 'yes' } }],
    ['/properties/x/colour', { x: { type: 'string', colour: 'red' } }],
  ])('refuses %s', (path, extra) => {
    const errors = checkObjectType({ ...order, properties: { ...order.properties, ...extra } }, 'Order');
    expect(paths(errors)).toContain(path);
  });

  it('refuses a primary key that is not a property, or not a string or integer', () => {
    expect(paths(checkObjectType({ ...order, primaryKey: 'nope' }, 'Order'))).toEqual(['/primaryKey']);
    expect(paths(checkObjectType({ ...order, primaryKey: 'where' }, 'Order'))).toEqual(['/primaryKey']);
  });

  it('refuses invalid names and a body apiName that differs from the path', () => {
    expect(paths(checkObjectType(order, 'bad name'))).toContain('/apiName');
    expect(paths(checkObjectType(order, 'Other'))).toContain('/apiName');
  });
});

describe('link and action types', () => {
  it('refuses a link to a missing type', () => {
    const errors = checkLinkType({ from: 'Order', to: 'Ghost', cardinality: 'ONE_TO_ONE' }, 'haunts', schema());
    expect(errors).toEqual([{ path: '/to', message: 'object type "Ghost" does not exist' }]);
    expect(paths(checkLinkType({ from: 'Order', to: 'Customer', cardinality: 'SOME' }, 'x', schema()))).toEqual([
      '/cardinality',
    ]);
  });

  it('refuses an action editing a missing property, type, link or parameter', () => {
    const action = {
      parameters: { o: { type: 'string' } },
      edits: [
        { op: 'modifyObject', objectType: 'Order', pk: { param: 'o' }, values: { colour: { value: 'red' } } },
        { op: 'createObject', objectType: 'Ghost', pk: { param: 'o' }, values: {} },
        { op: 'createLink', linkType: 'nope', from: { param: 'o' }, to: { param: 'missing' } },
      ],
      idempotencyKey: ['o', 'zz'],
    };
    expect(paths(checkActionType(action, 'act', schema()))).toEqual([
      '/edits/0/values/colour',
      '/edits/1/objectType',
      '/edits/2/linkType',
      '/edits/2/to/param',
      '/idempotencyKey/1',
    ]);
  });

  it('finds what still uses a type', () => {
    expect(paths(usesOf(schema(), 'objectType', 'Order'))).toEqual([
      '/linkTypes/placedBy',
      '/actionTypes/ship/edits/0',
    ]);
    expect(usesOf(schema(), 'linkType', 'placedBy')).toEqual([]);
  });
});

describe('schema diff', () => {
  it('marks type changes and removals breaking, additions not', () => {
    const before = schema();
    const after = schema();
    after.objectTypes.Order = {
      ...order,
      properties: { ...order.properties, amount: { type: 'double' }, note: { type: 'string' } },
    };
    delete (after.objectTypes.Order.properties as Record<string, unknown>).where;
    const diff = diffSchemas(before, after);
    expect(diff.breaking).toBe(true);
    expect(diff.changes).toEqual(
      expect.arrayContaining([
        { path: '/objectTypes/Order/properties/where', change: 'removed', breaking: true, reason: 'property removed' },
        {
          path: '/objectTypes/Order/properties/amount/type',
          change: 'changed',
          breaking: true,
          reason: 'property type changed',
        },
        { path: '/objectTypes/Order/properties/note', change: 'added', breaking: false },
      ]),
    );
  });

  it('sees no change when only the order of keys differs, as after a round trip through jsonb', () => {
    const reordered = JSON.parse(JSON.stringify(schema()), (_key, value) =>
      value && typeof value === 'object' && !Array.isArray(value)
        ? Object.fromEntries(Object.entries(value).reverse())
        : value,
    );
    expect(diffSchemas(schema(), reordered)).toEqual({ changes: [], breaking: false });
  });

  it('is empty for equal schemas and non-breaking for a new type', () => {
    expect(diffSchemas(schema(), schema())).toEqual({ changes: [], breaking: false });
    const diff = diffSchemas(emptySchema(), { ...emptySchema(), objectTypes: { Customer: customer } });
    expect(diff).toEqual({
      changes: [{ path: '/objectTypes/Customer', change: 'added', breaking: false }],
      breaking: false,
    });
  });

  it('marks a removed object type breaking', () => {
    const after = schema();
    delete (after.objectTypes as Record<string, unknown>).Customer;
    expect(diffSchemas(schema(), after).changes).toContainEqual({
      path: '/objectTypes/Customer',
      change: 'removed',
      breaking: true,
      reason: 'removed',
    });
  });
});

describe('time-series properties', () => {
  const machine = (temperature: unknown): unknown => ({
    apiName: 'Machine',
    displayName: 'Machine',
    primaryKey: 'id',
    properties: { id: { type: 'string' }, temperature },
  });

  it('accepts a series of each point type, with a unit and a retention', () => {
    for (const value of ['double', 'integer', 'boolean', { type: 'enum', values: ['on', 'off'] }]) {
      expect(
        checkObjectType(machine({ type: { type: 'series', value }, unit: 'degC', retention: '30d' }), 'Machine'),
      ).toEqual([]);
    }
  });

  it.each([
    ['/properties/temperature/type/value', { type: { type: 'series', value: 'string' } }],
    ['/properties/temperature/type/value', { type: { type: 'series' } }],
    ['/properties/temperature/type/value/values', { type: { type: 'series', value: { type: 'enum', values: [] } } }],
    ['/properties/temperature/retention', { type: { type: 'series', value: 'double' }, retention: '30 days' }],
    ['/properties/temperature/retention', { type: { type: 'series', value: 'double' }, retention: '0d' }],
    ['/properties/temperature/required', { type: { type: 'series', value: 'double' }, required: true }],
    ['/properties/temperature/unit', { type: 'double', unit: 'degC' }],
    [
      '/properties/temperature/type/items/type',
      { type: { type: 'array', items: { type: 'series', value: 'double' } } },
    ],
  ])('refuses at %s: %j', (path, def) => {
    expect(paths(checkObjectType(machine(def), 'Machine'))).toContain(path);
  });

  it('refuses a series as an action parameter', () => {
    const errors = checkActionType(
      {
        parameters: { t: { type: { type: 'series', value: 'double' } } },
        edits: [{ op: 'deleteObject', objectType: 'Customer', pk: { param: 't' } }],
      },
      'a',
      schema(),
    );
    expect(paths(errors)).toContain('/parameters/t/type/type');
  });

  it('marks a new series harmless, a changed point type or a shortened retention breaking', () => {
    const before = schema();
    const withSeries = (def: object): SchemaDocument => {
      const s = schema();
      s.objectTypes.Order = { ...order, properties: { ...order.properties, load: def as never } };
      return s;
    };
    const d30 = withSeries({ type: { type: 'series', value: 'double' }, retention: '30d' });
    expect(diffSchemas(before, d30)).toMatchObject({ breaking: false });
    const longer = diffSchemas(d30, withSeries({ type: { type: 'series', value: 'double' }, retention: '8w' }));
    expect(longer.breaking).toBe(false);
    const shorter = diffSchemas(d30, withSeries({ type: { type: 'series', value: 'double' }, retention: '36h' }));
    expect(shorter.changes).toEqual([
      expect.objectContaining({ path: '/objectTypes/Order/properties/load/retention', breaking: true }),
    ]);
    const retyped = diffSchemas(d30, withSeries({ type: { type: 'series', value: 'integer' }, retention: '30d' }));
    expect(retyped.changes).toEqual([
      expect.objectContaining({ path: '/objectTypes/Order/properties/load/type', breaking: true }),
    ]);
  });
});
