/**
 * The bodies of `PUT …/object-types|link-types|action-types/{apiName}` as JSON Schema, for the
 * OpenAPI document: the shape model.ts checks (a fault is a 422 naming its JSON path). What a
 * schema cannot say (a primary key naming a property, references that resolve) stays model.ts's.
 */
import { CARDINALITIES, PRIMITIVES, RETENTION, SERIES_VALUES } from '@onto/shared';
import { type TSchema, Type } from '@sinclair/typebox';
import { NAME } from './model.js';

const Name = Type.String({ pattern: NAME.source });
const closed = { additionalProperties: false } as const;
const Text = (max: number) => Type.String({ maxLength: max });
const names = <T extends TSchema>(value: T, options: Record<string, unknown> = {}) =>
  Type.Record(Type.String({ pattern: NAME.source }), value, options);

const Enum = Type.Object(
  {
    type: Type.Literal('enum'),
    values: Type.Array(Type.String({ minLength: 1, maxLength: 200 }), {
      minItems: 1,
      maxItems: 1000,
      uniqueItems: true,
    }),
  },
  closed,
);

/** A property or parameter type, nested up to 8 levels: a primitive, an enum, an array or a struct. */
export const PropertyTypeSchema = Type.Recursive(
  (This) =>
    Type.Union([
      Type.Union(PRIMITIVES.map((p) => Type.Literal(p))),
      Enum,
      Type.Object({ type: Type.Literal('array'), items: This }, closed),
      Type.Object({ type: Type.Literal('struct'), fields: names(This, { minProperties: 1 }) }, closed),
    ]),
  { $id: 'PropertyType' },
);
const PropertyType = Type.Ref(PropertyTypeSchema);

const Property = Type.Object(
  {
    type: PropertyType,
    required: Type.Optional(Type.Boolean()),
    indexed: Type.Optional(Type.Boolean()),
    description: Type.Optional(Text(4000)),
  },
  closed,
);
const SeriesProperty = Type.Object(
  {
    type: Type.Object(
      { type: Type.Literal('series'), value: Type.Union([...SERIES_VALUES.map((v) => Type.Literal(v)), Enum]) },
      closed,
    ),
    description: Type.Optional(Text(4000)),
    unit: Type.Optional(Text(50)),
    retention: Type.Optional(Type.String({ pattern: RETENTION.source, description: '36h, 30d, 52w' })),
  },
  closed,
);

export const ObjectTypeBody = Type.Object(
  {
    apiName: Type.Optional(Name),
    displayName: Type.String({ minLength: 1, maxLength: 200 }),
    description: Type.Optional(Text(4000)),
    primaryKey: Type.String({ description: 'one of the properties, of type string or integer' }),
    properties: names(Type.Union([Property, SeriesProperty]), { minProperties: 1, maxProperties: 500 }),
  },
  { ...closed, description: 'an object type; apiName, when given, equals the path' },
);

export const LinkTypeBody = Type.Object(
  {
    apiName: Type.Optional(Name),
    displayName: Type.Optional(Text(200)),
    from: Type.String({ description: 'an object type of the world' }),
    to: Type.String({ description: 'an object type of the world' }),
    cardinality: Type.Union(CARDINALITIES.map((c) => Type.Literal(c))),
  },
  { ...closed, description: 'a link type; apiName, when given, equals the path' },
);

const Source = Type.Union([
  Type.Object({ param: Type.String({ description: 'a declared parameter' }) }, closed),
  Type.Object({ value: Type.Unknown({ description: 'a constant' }) }, { ...closed, required: ['value'] }),
]);
const Edit = Type.Union([
  Type.Object(
    {
      op: Type.Union([Type.Literal('createObject'), Type.Literal('modifyObject')]),
      objectType: Type.String(),
      pk: Source,
      values: Type.Record(Type.String(), Source, { description: "the object type's properties" }),
    },
    closed,
  ),
  Type.Object({ op: Type.Literal('deleteObject'), objectType: Type.String(), pk: Source }, closed),
  Type.Object(
    {
      op: Type.Union([Type.Literal('createLink'), Type.Literal('deleteLink')]),
      linkType: Type.String(),
      from: Source,
      to: Source,
    },
    closed,
  ),
]);

export const ActionTypeBody = Type.Object(
  {
    apiName: Type.Optional(Name),
    displayName: Type.Optional(Text(200)),
    description: Type.Optional(Text(4000)),
    parameters: Type.Optional(
      names(
        Type.Object(
          { type: PropertyType, required: Type.Optional(Type.Boolean()), description: Type.Optional(Type.Unknown()) },
          closed,
        ),
      ),
    ),
    edits: Type.Array(Edit, { minItems: 1, maxItems: 100 }),
    idempotencyKey: Type.Optional(Type.Array(Type.String({ description: 'a declared parameter' }), { minItems: 1 })),
  },
  { ...closed, description: 'an action type; apiName, when given, equals the path' },
);
