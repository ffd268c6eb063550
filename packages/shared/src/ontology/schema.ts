/**
 * The shape of a world's ontology schema as control publishes it in `schema.updated` and other
 * services replicate it. Validation of schema changes lives in control; validation of objects
 * against a schema lives with the objects (data).
 */
export const PRIMITIVES = ['string', 'integer', 'double', 'boolean', 'timestamp', 'date', 'geopoint'] as const;
export type Primitive = (typeof PRIMITIVES)[number];
export type PropertyType =
  | Primitive
  | { type: 'enum'; values: string[] }
  | { type: 'array'; items: PropertyType }
  | { type: 'struct'; fields: Record<string, PropertyType> }
  | SeriesType;

/** What each point of a time-series property holds (docs/adr/0028). */
export const SERIES_VALUES = ['double', 'integer', 'boolean'] as const;
export type SeriesValue = (typeof SERIES_VALUES)[number] | { type: 'enum'; values: string[] };

/** A time-series property: its points live beside the object (data's series_points), not in its properties. */
export interface SeriesType {
  type: 'series';
  value: SeriesValue;
}

/** A retention: a whole number of hours, days or weeks (`36h`, `30d`, `52w`). */
export const RETENTION = /^([1-9][0-9]{0,5})([hdw])$/;

/** A retention in milliseconds; undefined when not a retention. */
export function retentionMs(text: string): number | undefined {
  const m = RETENTION.exec(text);
  if (!m) return undefined;
  const unit = { h: 3_600_000, d: 86_400_000, w: 604_800_000 }[m[2] as 'h' | 'd' | 'w'];
  return Number(m[1]) * unit;
}

export const isSeriesType = (t: PropertyType): t is SeriesType => typeof t === 'object' && t.type === 'series';

export interface PropertyDef {
  type: PropertyType;
  required?: boolean;
  indexed?: boolean;
  description?: string;
  /** Series only: the unit of the points' values (`degC`, `ms`). */
  unit?: string;
  /** Series only: how long points are kept (`30d`); forever when absent. */
  retention?: string;
}

export interface ObjectType {
  apiName: string;
  displayName: string;
  description?: string;
  primaryKey: string;
  properties: Record<string, PropertyDef>;
}

export const CARDINALITIES = ['ONE_TO_ONE', 'ONE_TO_MANY', 'MANY_TO_MANY'] as const;
export interface LinkType {
  apiName: string;
  displayName?: string;
  from: string;
  to: string;
  cardinality: (typeof CARDINALITIES)[number];
}

export interface ParameterDef {
  type: PropertyType;
  required?: boolean;
  description?: string;
}

/** Where an edit's value comes from: a parameter of the action, or a constant. */
export type ValueSource = { param: string } | { value: unknown };

export type ActionEdit =
  | { op: 'createObject' | 'modifyObject'; objectType: string; pk: ValueSource; values: Record<string, ValueSource> }
  | { op: 'deleteObject'; objectType: string; pk: ValueSource }
  | { op: 'createLink' | 'deleteLink'; linkType: string; from: ValueSource; to: ValueSource };

export interface ActionType {
  apiName: string;
  displayName?: string;
  description?: string;
  parameters: Record<string, ParameterDef>;
  edits: ActionEdit[];
  /** Parameters that, with the world and action type, identify one execution. */
  idempotencyKey?: string[];
}

export interface SchemaDocument {
  objectTypes: Record<string, ObjectType>;
  linkTypes: Record<string, LinkType>;
  actionTypes: Record<string, ActionType>;
}

export const emptySchema = (): SchemaDocument => ({ objectTypes: {}, linkTypes: {}, actionTypes: {} });
