/**
 * Derived-property definitions as pure rules: what a definition says, how it is checked against
 * the replicated schema and the world's other definitions, and what it depends on.
 */
import {
  type FieldError,
  isSeriesType,
  type ObjectType,
  ownValue,
  type PropertyType,
  type SchemaDocument,
} from '@onto/shared';
import { compile, missingProperties, type Program } from '../cel/expressions.js';
import type { Definition } from '../definitions.js';

export const AGGREGATE_FUNCTIONS = ['count', 'sum', 'min', 'max', 'avg'] as const;
export type AggregateFunction = (typeof AGGREGATE_FUNCTIONS)[number];
export type Direction = 'out' | 'in';

/**
 * An aggregate as declared: over the objects linked through `linkType`, or over the points of
 * one of the object's own time series in a window ending at its latest point (docs/adr/0028).
 */
export interface AggregateDecl {
  function: AggregateFunction;
  linkType?: string;
  /** A time-series property of the object … */
  series?: string;
  /** … and the window's width: `30s`, `15m`, `1h`, `1d`, `1w`. */
  window?: string;
  /** out: the object is the link's `from` end (aggregates its `to` objects); in: the reverse. */
  direction?: Direction;
  /** The linked objects' property (sum, min, max, avg) … */
  property?: string;
  /** … or their derived property. */
  derived?: string;
}

export interface DerivedInput {
  objectType: string;
  expression: string;
  aggregates: Record<string, AggregateDecl>;
  maxStalenessMs: number;
  description?: string | undefined;
}

export interface DerivedDefinition extends DerivedInput, Definition {
  /** Since when values computed by this version count as current. */
  validSince: string;
}

/** An aggregate resolved against the schema: which end, which objects, which kind of number. */
export interface AggregateSpec {
  alias: string;
  function: AggregateFunction;
  linkType: string;
  direction: Direction;
  /** The type of the objects aggregated over. */
  targetType: string;
  property?: string;
  derived?: string;
  /** What CEL sees: int for counts and sums/min/max of integer properties, double otherwise. */
  numeric: 'int' | 'double' | 'derived';
  /** A window over the object's own series (linkType empty, targetType the object's type). */
  series?: string;
  windowMs?: number;
}

const WINDOW = /^([1-9][0-9]{0,5})(s|m|h|d|w)$/;
const WINDOW_UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/** A window width in milliseconds, or undefined. */
export function windowMs(text: string): number | undefined {
  const m = WINDOW.exec(text);
  return m ? Number(m[1]) * WINDOW_UNIT_MS[m[2] as keyof typeof WINDOW_UNIT_MS] : undefined;
}

/** A series window declaration checked against the object type; the spec, or a fault. */
function seriesSpec(alias: string, decl: AggregateDecl, type: ObjectType | undefined): AggregateSpec | FieldError {
  const at = `/aggregates/${alias}`;
  if (
    decl.linkType !== undefined ||
    decl.direction !== undefined ||
    decl.property !== undefined ||
    decl.derived !== undefined
  )
    return { path: at, message: 'a series window takes neither linkType, direction, property nor derived' };
  const def =
    type && decl.series !== undefined && Object.hasOwn(type.properties, decl.series)
      ? type.properties[decl.series]
      : undefined;
  if (!type || !def || !isSeriesType(def.type))
    return { path: `${at}/series`, message: `${type?.apiName ?? 'the object type'} has no time series ${decl.series}` };
  const width = decl.window === undefined ? undefined : windowMs(decl.window);
  if (width === undefined)
    return { path: `${at}/window`, message: 'must be a duration: a whole number of s, m, h, d or w, such as 1h' };
  const value = def.type.value;
  if (decl.function !== 'count' && value !== 'double' && value !== 'integer')
    return {
      path: `${at}/function`,
      message: `${decl.function} needs numbers: ${decl.series} holds ${typeof value === 'string' ? value : 'labels'}`,
    };
  const numeric = decl.function === 'count' ? 'int' : decl.function === 'avg' || value === 'double' ? 'double' : 'int';
  return {
    alias,
    function: decl.function,
    linkType: '',
    direction: 'out',
    targetType: type.apiName,
    numeric,
    series: decl.series as string,
    windowMs: width,
  };
}

/** A definition ready to evaluate: its program and everything it reads. */
export interface ResolvedDerived {
  name: string;
  objectType: string;
  version: number;
  maxStalenessMs: number;
  validSince: string;
  program: Program;
  ownProperties: Set<string>;
  ownDerived: Set<string>;
  aggregates: AggregateSpec[];
}

export const DEFAULT_MAX_STALENESS_MS = 60_000;

const isNumeric = (t: PropertyType | undefined) => t === 'integer' || t === 'double';

/**
 * Checks a definition against the schema and the world's other definitions (by name, the ones
 * it may read: `derived.<x>` on the same object type, aggregates over a derived property of the
 * linked type). Returns every fault, located by JSON path, or the resolved definition.
 */
export function resolveDerived(
  name: string,
  input: DerivedInput,
  meta: { version: number; validSince: string },
  schema: SchemaDocument,
  others: ReadonlyMap<string, { objectType: string; state: 'valid' | 'invalid' }>,
): { errors: FieldError[]; resolved?: ResolvedDerived } {
  const errors: FieldError[] = [];
  const type: ObjectType | undefined = Object.hasOwn(schema.objectTypes, input.objectType)
    ? schema.objectTypes[input.objectType]
    : undefined;
  if (!type) {
    errors.push({ path: '/objectType', message: `object type ${input.objectType} is not in the world's schema` });
  }
  const derivedRef = (path: string, target: string, onType: string) => {
    const other = others.get(target);
    if (target === name) return { path, message: `${name} cannot read itself (cycle ${name} → ${name})` };
    if (!other) return { path, message: `derived property ${target} is not defined` };
    if (other.objectType !== onType) {
      return { path, message: `derived property ${target} is on ${other.objectType}, not ${onType}` };
    }
    if (other.state !== 'valid') return { path, message: `derived property ${target} is invalid` };
    return undefined;
  };

  const aggregates: AggregateSpec[] = [];
  for (const [alias, decl] of Object.entries(input.aggregates)) {
    const at = `/aggregates/${alias}`;
    if (decl.series !== undefined || decl.window !== undefined) {
      const spec = seriesSpec(alias, decl, type);
      if ('path' in spec) errors.push(spec);
      else aggregates.push(spec);
      continue;
    }
    if (decl.linkType === undefined) {
      errors.push({
        path: `${at}/linkType`,
        message: 'is required (or series and window, for a window of a time series)',
      });
      continue;
    }
    const link = Object.hasOwn(schema.linkTypes, decl.linkType) ? schema.linkTypes[decl.linkType] : undefined;
    if (!link) {
      errors.push({ path: `${at}/linkType`, message: `link type ${decl.linkType} is not in the world's schema` });
      continue;
    }
    let direction = decl.direction;
    const outgoing = link.from === input.objectType;
    const incoming = link.to === input.objectType;
    if (!outgoing && !incoming) {
      errors.push({
        path: `${at}/linkType`,
        message: `link type ${decl.linkType} links ${link.from} to ${link.to}, not ${input.objectType}`,
      });
      continue;
    }
    if (direction === undefined) {
      if (outgoing && incoming) {
        errors.push({
          path: `${at}/direction`,
          message: `link type ${decl.linkType} links ${input.objectType} to itself: say out or in`,
        });
        continue;
      }
      direction = outgoing ? 'out' : 'in';
    } else if ((direction === 'out' && !outgoing) || (direction === 'in' && !incoming)) {
      errors.push({
        path: `${at}/direction`,
        message: `${input.objectType} is not the ${direction === 'out' ? 'from' : 'to'} end of ${decl.linkType}`,
      });
      continue;
    }
    const targetType = direction === 'out' ? link.to : link.from;
    const target = Object.hasOwn(schema.objectTypes, targetType) ? schema.objectTypes[targetType] : undefined;
    const spec: AggregateSpec = {
      alias,
      function: decl.function,
      linkType: decl.linkType,
      direction,
      targetType,
      numeric: 'int',
    };
    if (decl.function === 'count') {
      if (decl.property !== undefined || decl.derived !== undefined) {
        errors.push({ path: at, message: 'count takes neither property nor derived' });
        continue;
      }
    } else if ((decl.property === undefined) === (decl.derived === undefined)) {
      errors.push({ path: at, message: `${decl.function} needs exactly one of property or derived` });
      continue;
    } else if (decl.property !== undefined) {
      const prop =
        target && Object.hasOwn(target.properties, decl.property) ? target.properties[decl.property] : undefined;
      if (!prop) {
        errors.push({ path: `${at}/property`, message: `${targetType} has no property ${decl.property}` });
        continue;
      }
      if (!isNumeric(prop.type as PropertyType)) {
        errors.push({
          path: `${at}/property`,
          message: `${decl.function} needs a number: ${targetType}.${decl.property} is ${JSON.stringify(prop.type)}`,
        });
        continue;
      }
      spec.property = decl.property;
      spec.numeric = decl.function === 'avg' || prop.type === 'double' ? 'double' : 'int';
    } else if (decl.derived !== undefined) {
      const fault = derivedRef(`${at}/derived`, decl.derived, targetType);
      if (fault) {
        errors.push(fault);
        continue;
      }
      spec.derived = decl.derived;
      spec.numeric = decl.function === 'avg' ? 'double' : 'derived';
    }
    aggregates.push(spec);
  }

  const compiled = compile(input.expression, ['self', 'derived', 'agg']);
  if (!compiled.ok) {
    errors.push({ path: '/expression', message: compiled.message });
    return { errors };
  }
  errors.push(...missingProperties(compiled.refs, type, input.objectType, '/expression'));
  for (const d of compiled.refs.derived) {
    const fault = derivedRef('/expression', d, input.objectType);
    if (fault) errors.push({ path: fault.path, message: `derived.${d}: ${fault.message}` });
  }
  const declared = new Set(Object.keys(input.aggregates));
  for (const a of compiled.refs.agg) {
    if (!declared.has(a)) errors.push({ path: '/expression', message: `agg.${a} is not declared in aggregates` });
  }
  for (const a of declared) {
    if (!compiled.refs.agg.has(a)) {
      errors.push({ path: `/aggregates/${a}`, message: `is declared but the expression never reads agg.${a}` });
    }
  }
  if (errors.length > 0) return { errors };
  return {
    errors,
    resolved: {
      name,
      objectType: input.objectType,
      version: meta.version,
      maxStalenessMs: input.maxStalenessMs,
      validSince: meta.validSince,
      program: compiled.program,
      ownProperties: compiled.refs.self,
      ownDerived: compiled.refs.derived,
      aggregates,
    },
  };
}

/** The names a definition reads of other derived properties (own and across links). */
export const derivedInputs = (d: Pick<ResolvedDerived, 'ownDerived' | 'aggregates'>): string[] => [
  ...d.ownDerived,
  ...d.aggregates.flatMap((a) => (a.derived ? [a.derived] : [])),
];

/**
 * Orders definitions so that each comes after those it reads; a cycle is returned as the path
 * that closes it (`a → b → a`).
 */
export function topologicalOrder<T extends { name: string }>(
  defs: readonly T[],
  inputs: (d: T) => string[],
): { order: T[] } | { cycle: string[] } {
  const byName = new Map(defs.map((d) => [d.name, d]));
  const state = new Map<string, 'visiting' | 'done'>();
  const order: T[] = [];
  const stack: string[] = [];
  const visit = (d: T): string[] | undefined => {
    const s = state.get(d.name);
    if (s === 'done') return undefined;
    if (s === 'visiting') return [...stack.slice(stack.indexOf(d.name)), d.name];
    state.set(d.name, 'visiting');
    stack.push(d.name);
    for (const input of inputs(d)) {
      const next = byName.get(input);
      if (!next) continue;
      const cycle = visit(next);
      if (cycle) return cycle;
    }
    stack.pop();
    state.set(d.name, 'done');
    order.push(d);
    return undefined;
  };
  for (const d of [...defs].sort((a, b) => a.name.localeCompare(b.name))) {
    const cycle = visit(d);
    if (cycle) return { cycle };
  }
  return { order };
}

const propertyOf = (type: ObjectType | undefined, name: string) => (type ? ownValue(type.properties, name) : undefined);

/**
 * The schema elements a definition reads, as one comparable string: a schema change that leaves
 * it equal does not affect the definition's values.
 */
export function schemaFootprint(input: DerivedInput, refs: { self: Iterable<string> }, schema: SchemaDocument): string {
  // Every name here is the definition's or the schema's: own lookups only (a type `toString`).
  const type = ownValue(schema.objectTypes, input.objectType);
  const own = Object.fromEntries([...refs.self].sort().map((p) => [p, propertyOf(type, p)?.type ?? null]));
  const links = Object.fromEntries(
    Object.entries(input.aggregates)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([alias, a]) => {
        if (a.series !== undefined) return [alias, { series: propertyOf(type, a.series) ?? null }];
        const link = a.linkType === undefined ? undefined : ownValue(schema.linkTypes, a.linkType);
        const far = link ? (link.from === input.objectType ? link.to : link.from) : null;
        const farType = far ? ownValue(schema.objectTypes, far) : undefined;
        const prop = a.property ? (propertyOf(farType, a.property)?.type ?? null) : null;
        return [alias, { link: link ? [link.from, link.to] : null, prop }];
      }),
  );
  return JSON.stringify({ type: type ? input.objectType : null, own, links });
}
