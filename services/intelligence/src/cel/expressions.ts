/**
 * CEL as intelligence uses it: one environment, expressions parsed once and checked for what
 * they refer to, programs planned once and cached by their text, values converted between JSON
 * (how objects and derived values are stored) and CEL (ints are not doubles there).
 *
 * An expression reads four variables, each a map addressed by name:
 * - `self.<property>`: the object's own properties (typed by the replicated schema); a bare
 *   `<property>` is the same, when the name is not one of these four, a type or a loop variable;
 * - `derived.<name>`: the object's other derived properties;
 * - `agg.<alias>`: the aggregates a derived property declares over linked objects;
 * - `alert.<field>`: the alert a decision is made for (decision parameters only).
 */
import {
  CelScalar,
  type CelValue,
  celEnv,
  isCelError,
  isCelList,
  isCelMap,
  isCelUint,
  mapType,
  parse,
  plan,
} from '@bufbuild/cel';
import { strings } from '@bufbuild/cel/ext';
import { type FieldError, type ObjectType, type PropertyType, setOwn } from '@onto/shared';
import {
  budgetFunction,
  budgetSpent,
  EVALUATION_BUDGET,
  estimateCost,
  instrument,
  type Node,
  openBudget,
} from './budget.js';

export const ROOTS = ['self', 'derived', 'agg', 'alert'] as const;
export type Root = (typeof ROOTS)[number];

const anyMap = mapType(CelScalar.STRING, CelScalar.DYN);
const ENV = celEnv({
  variables: { self: anyMap, derived: anyMap, agg: anyMap, alert: anyMap },
  funcs: strings,
});
// The environment programs are planned in: the user's, and the budget's charge (./budget.ts).
const PLANNING_ENV = celEnv({
  variables: { self: anyMap, derived: anyMap, agg: anyMap, alert: anyMap },
  funcs: [...strings, budgetFunction],
});

/** Longest expression accepted, in characters. */
export const MAX_EXPRESSION_LENGTH = 4096;

export type Bindings = Partial<Record<Root, Record<string, unknown>>>;
export type Program = (bindings: Bindings) => unknown;

/** What an expression reads: the names it selects on each root; `bare` the properties named bare. */
export type References = Record<Root, Set<string>> & { bare: Set<string> };

export type Compiled = { ok: true; program: Program; refs: References } | { ok: false; message: string };

// Calls the planner handles itself, and type names usable as identifiers (`type(x) == int`).
const BUILTIN_CALLS = new Set(['_&&_', '_||_', '_?_:_', '@not_strictly_false', '_[_]', '_[?_]']);
const TYPE_NAMES = new Set(['int', 'uint', 'double', 'bool', 'string', 'bytes', 'list', 'map', 'null_type', 'type']);

// The parser's syntax tree, as much of it as the walk needs.
interface Expr {
  exprKind:
    | { case: 'constExpr'; value: { constantKind: { case: string | undefined; value?: unknown } } }
    | { case: 'identExpr'; value: { name: string } }
    | { case: 'selectExpr'; value: { operand?: Expr; field: string; testOnly: boolean } }
    | { case: 'callExpr'; value: { target?: Expr; function: string; args: Expr[] } }
    | { case: 'listExpr'; value: { elements: Expr[] } }
    | {
        case: 'structExpr';
        value: {
          messageName: string;
          entries: { keyKind: { case: string | undefined; value?: unknown }; value?: Expr }[];
        };
      }
    | {
        case: 'comprehensionExpr';
        value: {
          iterVar: string;
          iterVar2: string;
          accuVar: string;
          iterRange?: Expr;
          accuInit?: Expr;
          loopCondition?: Expr;
          loopStep?: Expr;
          result?: Expr;
        };
      }
    | { case: undefined; value?: undefined };
}

class ReferenceFault extends Error {}

function collect(expr: Expr | undefined, roots: ReadonlySet<Root>, bound: ReadonlySet<string>, refs: References) {
  if (!expr) return;
  const kind = expr.exprKind;
  const isRoot = (e: Expr | undefined): Root | undefined => {
    if (e?.exprKind.case !== 'identExpr') return undefined;
    const name = e.exprKind.value.name;
    return !bound.has(name) && (ROOTS as readonly string[]).includes(name) ? (name as Root) : undefined;
  };
  const use = (root: Root, field: string) => {
    if (!roots.has(root)) throw new ReferenceFault(`${root} is not available here (use ${[...roots].join(', ')})`);
    refs[root].add(field);
  };
  switch (kind.case) {
    case 'constExpr':
    case undefined:
      return;
    case 'identExpr': {
      const name = kind.value.name;
      if (bound.has(name) || TYPE_NAMES.has(name)) return;
      if ((ROOTS as readonly string[]).includes(name)) {
        throw new ReferenceFault(`${name} must be followed by a name: ${name}.<name> or ${name}['<name>']`);
      }
      if (roots.has('self')) {
        refs.self.add(name);
        refs.bare.add(name);
        return;
      }
      throw new ReferenceFault(`unknown identifier ${name} (use ${[...roots].map((r) => `${r}.<name>`).join(', ')})`);
    }
    case 'selectExpr': {
      const root = isRoot(kind.value.operand);
      if (root) use(root, kind.value.field);
      else collect(kind.value.operand, roots, bound, refs);
      return;
    }
    case 'callExpr': {
      const { function: fn, target, args } = kind.value;
      if (fn === '_[_]' || fn === '_[?_]') {
        const root = isRoot(args[0]);
        const key = args[1]?.exprKind;
        if (root) {
          if (key?.case !== 'constExpr' || key.value.constantKind.case !== 'stringValue') {
            throw new ReferenceFault(`${root}[...] must name a property with a string literal`);
          }
          use(root, String(key.value.constantKind.value));
          return;
        }
      }
      if (!BUILTIN_CALLS.has(fn) && !ENV.funcs.find(fn)) throw new ReferenceFault(`unknown function ${fn}`);
      collect(target, roots, bound, refs);
      for (const arg of args) collect(arg, roots, bound, refs);
      return;
    }
    case 'listExpr':
      for (const e of kind.value.elements) collect(e, roots, bound, refs);
      return;
    case 'structExpr':
      if (kind.value.messageName !== '')
        throw new ReferenceFault(`messages (${kind.value.messageName}) are not supported`);
      for (const entry of kind.value.entries) {
        if (entry.keyKind.case === 'mapKey') collect(entry.keyKind.value as Expr, roots, bound, refs);
        collect(entry.value, roots, bound, refs);
      }
      return;
    case 'comprehensionExpr': {
      const c = kind.value;
      collect(c.iterRange, roots, bound, refs);
      collect(c.accuInit, roots, bound, refs);
      const inner = new Set([...bound, c.iterVar, c.accuVar, ...(c.iterVar2 ? [c.iterVar2] : [])]);
      collect(c.loopCondition, roots, inner, refs);
      collect(c.loopStep, roots, inner, refs);
      collect(c.result, roots, new Set([...bound, c.accuVar]), refs);
      return;
    }
  }
}

const cache = new Map<string, Compiled>();
const MAX_CACHED = 10_000;

/**
 * A fault at `path` for each property an expression reads (`self.<p>`, or bare) that the object
 * type does not have; none for a type not in the schema, which is a fault of its own.
 */
export function missingProperties(
  refs: References,
  type: ObjectType | undefined,
  objectType: string,
  path: string,
): FieldError[] {
  if (!type) return [];
  return [...refs.self]
    .filter((p) => !Object.hasOwn(type.properties, p))
    .map((p) => ({ path, message: `${refs.bare.has(p) ? p : `self.${p}`}: ${objectType} has no property ${p}` }));
}

/**
 * Parses and plans `source`, refusing identifiers other than `roots` and functions CEL does not
 * have; the result is cached by text and roots (a program does not depend on anything else).
 */
export function compile(source: string, roots: readonly Root[]): Compiled {
  const key = `${roots.join(',')}\u0000${source}`;
  const hit = cache.get(key);
  if (hit) return hit;
  const compiled = compileUncached(source, new Set(roots));
  if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value as string);
  cache.set(key, compiled);
  return compiled;
}

function compileUncached(source: string, roots: ReadonlySet<Root>): Compiled {
  if (source.trim() === '') return { ok: false, message: 'must not be empty' };
  if (source.length > MAX_EXPRESSION_LENGTH) {
    return { ok: false, message: `must be at most ${MAX_EXPRESSION_LENGTH} characters` };
  }
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(source);
  } catch (error) {
    return { ok: false, message: `is not valid CEL: ${(error as Error).message.replace(/^syntax error: /, '')}` };
  }
  const refs: References = { self: new Set(), derived: new Set(), agg: new Set(), alert: new Set(), bare: new Set() };
  try {
    collect(parsed.expr as unknown as Expr, roots, new Set(), refs);
  } catch (error) {
    if (error instanceof ReferenceFault) return { ok: false, message: error.message };
    throw error;
  }
  const cost = estimateCost(parsed.expr as unknown as Node);
  if (cost > EVALUATION_BUDGET) {
    return {
      ok: false,
      message: `is estimated to cost ${cost} evaluation steps, over the limit of ${EVALUATION_BUDGET} (lists of unknown length count as 100 entries; nest fewer comprehensions or iterate shorter lists)`,
    };
  }
  instrument(parsed.expr as unknown as Node);
  const planned = plan(PLANNING_ENV, parsed);
  // Bare property names resolve from the top level; the four roots shadow properties so named.
  // Null prototype: the library reads a name off the activation, and a bare `toString` the object
  // lacks is then undeclared, not Object.prototype's method.
  const program: Program = (bindings) => {
    const activation = Object.assign(Object.create(null), bindings.self);
    for (const root of ROOTS) {
      const value = bindings[root];
      activation[root] = value === undefined ? {} : celObject(value);
    }
    return planned(activation as Parameters<typeof planned>[0]);
  };
  return { ok: true, program, refs };
}

/**
 * An object as @bufbuild/cel takes it for a map. The library recognises a plain object by
 * `v.constructor.name === 'Object'`, so one with an own property `constructor` (a property, a
 * struct field, a derived value or a map key so named) goes in as the Map it would have made.
 */
function celObject<T extends object>(o: T): T | Map<string, unknown> {
  return Object.hasOwn(o, 'constructor') ? new Map(Object.entries(o)) : o;
}

/** A JSON value and its CEL kind, or why the result cannot be stored. */
export type Outcome = { value: unknown; kind: string } | { error: string };

/**
 * Runs a program within the evaluation budget; CEL errors, thrown errors and a spent budget alike
 * become an error outcome, never a throw.
 */
export function evaluate(program: Program, bindings: Bindings): Outcome {
  let result: unknown;
  openBudget();
  try {
    result = program(bindings);
  } catch (error) {
    return { error: (error as Error).message ?? String(error) };
  }
  const spent = budgetSpent();
  if (spent) return { error: `${spent} (docs/adr/0021)` };
  if (isCelError(result)) return { error: result.message };
  return fromCel(result as CelValue, { left: MAX_RESULT_SIZE });
}

/** The largest value an evaluation may give, in characters of strings plus entries of lists and maps. */
export const MAX_RESULT_SIZE = 1_000_000;

/** Runs a condition: true, false, or an error (a non-boolean result is one). */
export function evaluateCondition(program: Program, bindings: Bindings): boolean | { error: string } {
  const outcome = evaluate(program, bindings);
  if ('error' in outcome) return outcome;
  if (typeof outcome.value !== 'boolean') return { error: `the condition gave a ${outcome.kind}, not a bool` };
  return outcome.value;
}

const TWO_53 = 2n ** 53n;

/** A CEL value as JSON: ints within ±2^53 as numbers, timestamps as RFC 3339, durations as "1.5s". */
export function fromCel(v: CelValue | unknown, size: { left: number } = { left: Number.POSITIVE_INFINITY }): Outcome {
  if (v === null) return { value: null, kind: 'null' };
  // Charged before converting: a list can hold the same large string a million times.
  size.left -= typeof v === 'string' ? v.length : 1;
  if (size.left < 0) return { error: `the result is larger than ${MAX_RESULT_SIZE} characters and entries` };
  switch (typeof v) {
    case 'boolean':
      return { value: v, kind: 'bool' };
    case 'string':
      return { value: v, kind: 'string' };
    case 'number':
      return Number.isFinite(v) ? { value: v, kind: 'double' } : { error: `the result ${v} is not a finite number` };
    case 'bigint':
      return v > -TWO_53 && v < TWO_53
        ? { value: Number(v), kind: 'int' }
        : { error: `the integer ${v} is beyond ±2^53 and cannot be stored exactly` };
  }
  if (isCelUint(v)) return fromCel(v.value, size);
  if (v instanceof Uint8Array) return { value: Buffer.from(v).toString('base64'), kind: 'bytes' };
  if (isCelList(v)) {
    const out: unknown[] = [];
    for (const item of v) {
      const o = fromCel(item, size);
      if ('error' in o) return o;
      out.push(o.value);
    }
    return { value: out, kind: 'list' };
  }
  if (isCelMap(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, item] of v) {
      const o = fromCel(item, size);
      if ('error' in o) return o;
      // A CEL map's keys are the expression's: `{'__proto__': …}` is an entry, not a prototype.
      setOwn(out, String(isCelUint(k) ? k.value : k), o.value);
    }
    return { value: out, kind: 'map' };
  }
  const message = v as { desc?: { typeName?: string }; message?: { seconds?: bigint; nanos?: number } };
  const typeName = message.desc?.typeName;
  if (typeName === 'google.protobuf.Timestamp' && message.message) {
    const ms = Number(message.message.seconds ?? 0n) * 1000 + Math.floor((message.message.nanos ?? 0) / 1e6);
    const date = new Date(ms);
    return Number.isNaN(date.getTime())
      ? { error: 'the timestamp is out of range' }
      : { value: date.toISOString(), kind: 'timestamp' };
  }
  if (typeName === 'google.protobuf.Duration' && message.message) {
    const seconds = Number(message.message.seconds ?? 0n) + (message.message.nanos ?? 0) / 1e9;
    return { value: `${seconds}s`, kind: 'duration' };
  }
  if (typeof v === 'object' && v !== null && 'name' in v && 'kind' in v) {
    return { value: String((v as { name: string }).name), kind: 'type' };
  }
  return { error: `the result ${typeName ?? typeof v} cannot be stored as JSON` };
}

/**
 * A stored property value as CEL sees it, by its schema type: integers are CEL ints (bigint),
 * doubles are doubles even when whole; timestamps and dates stay RFC 3339 strings.
 */
export function toCel(value: unknown, type: PropertyType | undefined): unknown {
  if (value === null || value === undefined) return null;
  if (type === undefined) return plainToCel(value);
  if (typeof type === 'string') {
    if (type === 'integer' && typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
    if (type === 'double' && typeof value === 'number') return value;
    if (type === 'geopoint') return plainToCel(value);
    return value;
  }
  if (type.type === 'array' && Array.isArray(value)) return value.map((item) => toCel(item, type.items));
  if (type.type === 'struct' && typeof value === 'object' && !Array.isArray(value)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      setOwn(out, k, toCel(v, Object.hasOwn(type.fields, k) ? type.fields[k] : undefined));
    }
    return celObject(out);
  }
  return value;
}

/** A value with no schema type (inside a derived list or map): whole numbers are doubles too. */
function plainToCel(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plainToCel);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) setOwn(out, k, plainToCel(v));
    return celObject(out);
  }
  return value;
}

/** A stored derived value as its dependents see it: its kind says whether a number is an int. */
export function derivedToCel(value: unknown, kind: string | null): unknown {
  if (kind === 'int' && typeof value === 'number') return BigInt(value);
  return plainToCel(value);
}

/** Properties of an object as the `self` binding, converted by the object type's property types. */
export function propertiesToCel(
  properties: Record<string, unknown>,
  types: Record<string, { type: PropertyType }> | undefined,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(properties)) {
    setOwn(out, k, toCel(v, types && Object.hasOwn(types, k) ? types[k]?.type : undefined));
  }
  return out;
}
