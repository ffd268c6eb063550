/**
 * Object-set queries as data (docs/adr/0047): the where-clause, `orderBy`, `select`, `pivotTo`,
 * `groupBy` and `metrics` of `POST …/objects/{type}/query|aggregate`, checked against a world's
 * schema and compiled to parameterised SQL. Pure: no I/O, no Fastify; the SQL it writes reads the
 * rows of an alias (`r.pk`, `r.properties`) and asks its caller for the one thing that depends on
 * where rows are stored, the links (`SqlContext.linkExists`), so that other sources reuse it: data's
 * heads and history, and intelligence's read model with its derived values (docs/adr/0075).
 */
import type { ObjectType, PropertyDef, PropertyType, SchemaDocument } from './schema.js';
import { checkValue, isPlainObject, pointer, stringFault } from './values.js';

export const QUERY_LIMITS = {
  /** Nesting of $and/$or/$not/$link. */
  depth: 16,
  /** Conditions (one operator on one property, or one $link) in a where-clause. */
  terms: 200,
  /** Values of one $in. */
  inValues: 1000,
  /** Terms of one full-text operator. */
  textTerms: 32,
  /** Characters of one string operand. */
  operand: 1000,
  orderBy: 8,
  pivotSteps: 8,
  groupBy: 3,
  metrics: 20,
  ranges: 100,
  maxGroups: 10_000,
  defaultMaxGroups: 1000,
} as const;

export const COMPARISONS = ['$eq', '$ne', '$in', '$gt', '$gte', '$lt', '$lte'] as const;
export const OPERATORS = [
  ...COMPARISONS,
  '$isNull',
  '$startsWith',
  '$contains',
  '$containsAnyTerm',
  '$containsAllTerms',
] as const;
export type Operator = (typeof OPERATORS)[number];

/** The kind of a property: its primitive name, or enum/array/struct/series. */
export const kindOf = (t: PropertyType): string => (typeof t === 'string' ? t : t.type);
/** Kinds whose stored JSON keeps their order (numbers, strings; timestamps and dates normalised). */
const ORDERED = new Set(['string', 'integer', 'double', 'timestamp', 'date', 'enum']);
const SCALAR = new Set([...ORDERED, 'boolean']);
const NUMERIC = new Set(['integer', 'double']);
const jsonTypeOf = (kind: string) => (NUMERIC.has(kind) ? 'number' : kind === 'boolean' ? 'boolean' : 'string');

/** A checked where-clause. */
export type WhereNode =
  | { kind: 'and' | 'or'; items: WhereNode[] }
  | { kind: 'not'; item: WhereNode }
  | {
      kind: 'cmp';
      property: string;
      /** The property is the type's primary key (the `pk` column). */
      pk: boolean;
      propertyKind: string;
      indexed: boolean;
      op: Operator;
      /** Checked value(s), as stored (timestamps normalised). */
      value: unknown;
      path: string;
    }
  | LinkNode;

export interface LinkNode {
  kind: 'link';
  linkType: string;
  /** The side of the link the outer object is on; the linked objects are on the other side. */
  side: 'from' | 'to';
  target: string;
  where: WhereNode | null;
  path: string;
}

/** A fault of a query: its JSON path and the rule (the shape of an HTTP problem's FieldError; ontology/ lies below http/). */
export interface QueryFault {
  path: string;
  message: string;
}

export class QueryFaults {
  readonly list: QueryFault[] = [];
  add(path: string, message: string) {
    this.list.push({ path, message });
  }
  get any() {
    return this.list.length > 0;
  }
}

const isOperator = (k: string): k is Operator => (OPERATORS as readonly string[]).includes(k);

/** The property definition of `name` on `type`, own keys only. */
function propertyOf(type: ObjectType, name: string): PropertyDef | undefined {
  return Object.hasOwn(type.properties, name) ? type.properties[name] : undefined;
}

function typeOf(doc: SchemaDocument, name: string): ObjectType | undefined {
  return Object.hasOwn(doc.objectTypes, name) ? doc.objectTypes[name] : undefined;
}

/**
 * The other side of link type `linkType` seen from objects of `from`: which side they are on and
 * the type reached. A link type from a type to itself is followed from its `from` side.
 */
export function linkStep(
  doc: SchemaDocument,
  from: string,
  linkType: string,
): { side: 'from' | 'to'; target: string } | { error: string } {
  const link = Object.hasOwn(doc.linkTypes, linkType) ? doc.linkTypes[linkType] : undefined;
  if (!link) return { error: `${JSON.stringify(linkType)} is not a link type of the schema` };
  if (link.from === from) return { side: 'from', target: link.to };
  if (link.to === from) return { side: 'to', target: link.from };
  return { error: `link type ${linkType} links ${link.from} to ${link.to}, not ${from}` };
}

/**
 * Checks a where-clause against object type `type` of schema `doc`; faults name their JSON path
 * under `base` (`body/where/$and/1/price/$gt`). null: no condition.
 */
export function parseWhere(
  doc: SchemaDocument,
  type: ObjectType,
  where: unknown,
  base = 'body/where',
  faults = new QueryFaults(),
): WhereNode | null {
  let terms = 0;
  const walk = (t: ObjectType, w: unknown, path: string, depth: number): WhereNode | null => {
    if (depth > QUERY_LIMITS.depth) {
      faults.add(path, `is nested deeper than ${QUERY_LIMITS.depth} levels`);
      return null;
    }
    if (!isPlainObject(w)) {
      faults.add(path, 'must be an object: {$and|$or: […]}, {$not: …}, {$link: …} or {<property>: <condition>}');
      return null;
    }
    const items: WhereNode[] = [];
    for (const [key, value] of Object.entries(w)) {
      const at = `${path}/${pointer(key)}`;
      if (key === '$and' || key === '$or') {
        if (!Array.isArray(value) || value.length === 0) {
          faults.add(at, 'must be a non-empty array of where-clauses');
          continue;
        }
        const parts = value.map((v, i) => walk(t, v, `${at}/${i}`, depth + 1));
        const kept = parts.filter((n) => n !== null);
        // An empty clause `{}` is true: it drops out of an $and and makes an $or true.
        if (key === '$and' && kept.length > 0) items.push({ kind: 'and', items: kept });
        if (key === '$or' && kept.length === parts.length) items.push({ kind: 'or', items: kept });
      } else if (key === '$not') {
        const item = walk(t, value, at, depth + 1);
        // {$not: {}} is false: an empty $or.
        items.push(item ? { kind: 'not', item } : { kind: 'or', items: [] });
      } else if (key === '$link') {
        terms++;
        if (!isPlainObject(value) || typeof value.type !== 'string') {
          faults.add(at, 'must be {type: <link type>, where?: <where-clause>}');
          continue;
        }
        const extra = Object.keys(value).filter((k) => k !== 'type' && k !== 'where');
        for (const k of extra) faults.add(`${at}/${pointer(k)}`, 'is not a known field');
        const step = linkStep(doc, t.apiName, value.type);
        if ('error' in step) {
          faults.add(`${at}/type`, step.error);
          continue;
        }
        const target = typeOf(doc, step.target);
        if (!target) {
          faults.add(`${at}/type`, `links to ${step.target}, which is not in the schema`);
          continue;
        }
        const inner = value.where === undefined ? null : walk(target, value.where, `${at}/where`, depth + 1);
        if (value.where !== undefined && inner === null) continue;
        items.push({
          kind: 'link',
          linkType: value.type,
          side: step.side,
          target: step.target,
          where: inner,
          path: at,
        });
      } else if (key.startsWith('$')) {
        faults.add(at, `unknown combinator ${JSON.stringify(key)}; use $and, $or, $not, $link or a property name`);
      } else {
        items.push(...conditions(t, key, value, at));
      }
    }
    if (terms > QUERY_LIMITS.terms) return null;
    if (items.length === 1) return items[0] as WhereNode;
    return items.length === 0 ? null : { kind: 'and', items };
  };

  const conditions = (t: ObjectType, name: string, raw: unknown, at: string): WhereNode[] => {
    const def = propertyOf(t, name);
    if (!def) {
      faults.add(at, `is not a property of ${t.apiName}`);
      return [];
    }
    const kind = kindOf(def.type);
    if (kind === 'series') {
      faults.add(at, `${name} is a time series: its points are read through …/series, not queried here`);
      return [];
    }
    const ops: [string, unknown][] = isPlainObject(raw) ? Object.entries(raw) : [['$eq', raw]];
    if (ops.length === 0) faults.add(at, 'must name at least one operator');
    const nodes: WhereNode[] = [];
    const isPk = name === t.primaryKey;
    for (const [op, value] of ops) {
      const path = isPlainObject(raw) ? `${at}/${pointer(op)}` : at;
      terms++;
      if (!isOperator(op)) {
        faults.add(path, `unknown operator ${JSON.stringify(op)}; use one of ${OPERATORS.join(', ')}`);
        continue;
      }
      const checked = operand(def.type, kind, op, value, path);
      if (checked === undefined) continue;
      nodes.push({
        kind: 'cmp',
        property: name,
        pk: isPk,
        propertyKind: kind,
        indexed: isPk || def.indexed === true,
        op,
        value: checked,
        path,
      });
    }
    return nodes;
  };

  /** The value of operator `op` on a property of type `t`, checked; undefined after a fault. */
  const operand = (t: PropertyType, kind: string, op: Operator, value: unknown, path: string): unknown => {
    const fail = (message: string) => {
      faults.add(path, message);
      return undefined;
    };
    const one = (v: unknown, p: string, as: PropertyType = t) => {
      const before = faults.list.length;
      const checked = checkValue(as, v, p, faults.list);
      return faults.list.length > before ? undefined : checked;
    };
    switch (op) {
      case '$isNull':
        return typeof value === 'boolean' ? value : fail('must be true or false');
      case '$eq':
      case '$ne':
        if (!SCALAR.has(kind))
          return fail(`${kind} properties take $isNull${kind === 'array' ? ' and $contains' : ''} only`);
        return one(value, path);
      case '$in': {
        if (!SCALAR.has(kind))
          return fail(`${kind} properties take $isNull${kind === 'array' ? ' and $contains' : ''} only`);
        if (!Array.isArray(value) || value.length === 0 || value.length > QUERY_LIMITS.inValues) {
          return fail(`must be an array of 1 to ${QUERY_LIMITS.inValues} values`);
        }
        const out = value.map((v, i) => one(v, `${path}/${i}`));
        return out.includes(undefined) ? undefined : out;
      }
      case '$gt':
      case '$gte':
      case '$lt':
      case '$lte':
        if (!ORDERED.has(kind)) return fail(`${kind} properties have no order: ${op} does not apply`);
        return one(value, path);
      case '$startsWith': {
        if (kind !== 'string' && kind !== 'enum') return fail(`applies to string properties, not ${kind}`);
        if (typeof value !== 'string' || value.length === 0) return fail('must be a non-empty string');
        const fault = stringFault(value, QUERY_LIMITS.operand);
        return fault ? fail(fault) : value;
      }
      case '$contains': {
        if (typeof t !== 'object' || t.type !== 'array') return fail(`applies to array properties, not ${kind}`);
        return one(value, path, t.items);
      }
      case '$containsAnyTerm':
      case '$containsAllTerms': {
        if (kind !== 'string') return fail(`full-text search applies to string properties, not ${kind}`);
        if (typeof value !== 'string') return fail('must be a string of terms');
        const fault = stringFault(value, QUERY_LIMITS.operand);
        if (fault) return fail(fault);
        const terms = textTerms(value);
        if (terms.length === 0) return fail('must hold at least one term (letters or digits)');
        if (terms.length > QUERY_LIMITS.textTerms) return fail(`must hold at most ${QUERY_LIMITS.textTerms} terms`);
        return terms;
      }
    }
  };

  if (where === undefined) return null;
  const node = walk(type, where, base, 1);
  if (terms > QUERY_LIMITS.terms) faults.add(base, `has ${terms} conditions; at most ${QUERY_LIMITS.terms}`);
  return faults.any ? null : node;
}

/**
 * The terms of a full-text operand: its runs of letters and digits, lower-cased, as PostgreSQL's
 * `simple` configuration splits and folds a document (`Foo-bar` → foo, bar).
 */
export function textTerms(text: string): string[] {
  return [...new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])];
}

/** What compiled SQL needs from its caller. */
export interface SqlContext {
  /** Adds a parameter; returns its placeholder. */
  param(value: unknown): string;
  /**
   * SQL true when the object `outer` (an alias with `pk`) has a live link of `link.linkType` on
   * `link.side` whose other end, an object of `link.target` aliased as the argument of
   * `inner`, satisfies `inner(alias)`.
   */
  linkExists(link: LinkNode, outer: string, inner: (alias: string) => string): string;
}

const SQL_CMP: Record<string, string> = { $gt: '>', $gte: '>=', $lt: '<', $lte: '<=' };

let linkAliases = 0;

/**
 * A link predicate as SQL over a service's storage: `outer.pk IN (…)` the keys on `link.side` of
 * the live links (`links`: the SELECTs of from_pk, to_pk that read them through a chain), whose
 * other end is among `ends` (the SELECTs of the linked objects matching the predicate's
 * where-clause, each with `pk`), or of any live link when `ends` is null (a link never outlives
 * its ends, docs/adr/0008). Uncorrelated, so that the planner starts from the narrower side; and
 * each branch of the links is joined with the ends on its own, so that a branch over a table is
 * probed by the linked key's index from the few matching objects, where a join with the union of
 * the branches would read every link of the type.
 */
export function linkPredicateSql(link: LinkNode, outer: string, links: string[], ends: string[] | null): string {
  const n = ++linkAliases % 1_000_000;
  const l = `l${n}`;
  if (ends === null) return `${outer}.pk IN (SELECT ${l}.${link.side}_pk FROM (${links.join(' UNION ALL ')}) ${l})`;
  const other = link.side === 'from' ? 'to' : 'from';
  const joined = links.map(
    (branch) => `SELECT ${l}.${link.side}_pk FROM (${branch}) ${l} JOIN o${n} ON o${n}.pk = ${l}.${other}_pk`,
  );
  // The ends once, as a CTE the branches share: copied into each branch, a predicate nested in the
  // ends' where-clause would be planned once per branch, and its own ends once per its branches.
  return `${outer}.pk IN (WITH o${n} AS (${ends.join(' UNION ALL ')}) ${joined.join(' UNION ALL ')})`;
}

/** The stored JSON value of a property of alias `a`. */
export const valueExpr = (ctx: SqlContext, a: string, property: string) =>
  `(${a}.properties -> ${ctx.param(property)}::text)`;

/** The document full-text search reads (docs/adr/0048: the same expression as its GIN index). */
export const textExpr = (ctx: SqlContext, a: string, property: string) =>
  `to_tsvector('simple'::regconfig, ${a}.properties ->> ${ctx.param(property)}::text)`;

/** The keys as a text primary key: integer keys are stored as their decimal text. */
const pkText = (v: unknown) => String(v);

/** SQL for a checked where-clause over alias `a` (true when null). */
export function compileWhere(node: WhereNode | null, ctx: SqlContext, a = 'r'): string {
  if (node === null) return 'true';
  switch (node.kind) {
    case 'and':
    case 'or':
      if (node.items.length === 0) return node.kind === 'and' ? 'true' : 'false';
      return `(${node.items.map((n) => compileWhere(n, ctx, a)).join(node.kind === 'and' ? ' AND ' : ' OR ')})`;
    case 'not':
      return `NOT coalesce(${compileWhere(node.item, ctx, a)}, false)`;
    case 'link':
      return ctx.linkExists(node, a, (inner) => compileWhere(node.where, ctx, inner));
    case 'cmp':
      return compileCondition(node, ctx, a);
  }
}

function compileCondition(n: Extract<WhereNode, { kind: 'cmp' }>, ctx: SqlContext, a: string): string {
  // Key columns: the primary key is the `pk` text column (its index) for equality, and for
  // order when the key is a string (text order is the stored JSON's order for strings).
  const keyColumn = n.pk && (n.op === '$eq' || n.op === '$ne' || n.op === '$in' || n.propertyKind === 'string');
  if (keyColumn) {
    const k = `${a}.pk`;
    switch (n.op) {
      case '$eq':
        return `${k} = ${ctx.param(pkText(n.value))}`;
      case '$ne':
        return `${k} <> ${ctx.param(pkText(n.value))}`;
      case '$in':
        return `${k} = ANY(${ctx.param((n.value as unknown[]).map(pkText))}::text[])`;
      case '$isNull':
        return n.value ? 'false' : 'true';
      case '$startsWith':
        return `starts_with(${k}, ${ctx.param(n.value)})`;
      default:
        if (n.op in SQL_CMP) return `${k} ${SQL_CMP[n.op]} ${ctx.param(n.value)}`;
    }
  }
  const json = (value: unknown) => `${ctx.param(JSON.stringify(value))}::jsonb`;
  if (n.op === '$startsWith') {
    return `starts_with(${a}.properties ->> ${ctx.param(n.property)}::text, ${ctx.param(n.value)})`;
  }
  if (n.op === '$containsAnyTerm' || n.op === '$containsAllTerms') {
    const terms = (n.value as string[]).map((t) => `'${t.replaceAll("'", "''")}'`);
    const query = terms.join(n.op === '$containsAnyTerm' ? ' | ' : ' & ');
    return `${textExpr(ctx, a, n.property)} @@ to_tsquery('simple'::regconfig, ${ctx.param(query)})`;
  }
  const v = valueExpr(ctx, a, n.property);
  switch (n.op) {
    case '$eq':
      return `${v} = ${json(n.value)}`;
    case '$ne':
      return `${v} IS DISTINCT FROM ${json(n.value)}`;
    case '$in':
      return `${v} = ANY(${ctx.param((n.value as unknown[]).map((x) => JSON.stringify(x)))}::jsonb[])`;
    case '$gt':
    case '$gte':
    case '$lt':
    case '$lte':
      // jsonb orders values of different JSON types by type first: the type is part of the rule.
      return `(${v} ${SQL_CMP[n.op]} ${json(n.value)} AND jsonb_typeof(${v}) = ${ctx.param(jsonTypeOf(n.propertyKind))})`;
    case '$isNull':
      return n.value ? `${v} IS NULL` : `${v} IS NOT NULL`;
    case '$contains':
      return `${v} @> ${json([n.value])}`;
    default:
      throw new Error(`no SQL for ${n.op}`);
  }
}

/** Operators an index of the property serves (docs/adr/0048). */
function served(n: Extract<WhereNode, { kind: 'cmp' }>): boolean {
  if (!n.indexed) return false;
  if (n.pk) return n.op === '$eq' || n.op === '$in' || (n.propertyKind === 'string' && n.op in SQL_CMP);
  return ['$eq', '$in', '$gt', '$gte', '$lt', '$lte', '$contains', '$containsAnyTerm', '$containsAllTerms'].includes(
    n.op,
  );
}

/**
 * Whether an index narrows the rows a where-clause reads: a condition an index serves, in every
 * branch of an $or, in one conjunct of an $and, or inside a $link (the planner starts from the
 * linked side). Otherwise the first condition to index, to name in the refusal.
 */
export function indexedAccess(
  node: WhereNode | null,
): { indexed: true } | { indexed: false; property: string; path: string } {
  if (node === null) return { indexed: false, property: '', path: '' };
  switch (node.kind) {
    case 'cmp':
      return served(node) ? { indexed: true } : { indexed: false, property: node.property, path: node.path };
    case 'link':
      return indexedAccess(node.where);
    case 'not': {
      const inner = indexedAccess(node.item);
      return inner.indexed ? { indexed: false, property: '', path: '' } : inner;
    }
    case 'and': {
      let first: { indexed: false; property: string; path: string } | undefined;
      for (const item of node.items) {
        const r = indexedAccess(item);
        if (r.indexed) return r;
        first ??= r;
      }
      return first ?? { indexed: false, property: '', path: '' };
    }
    case 'or': {
      for (const item of node.items) {
        const r = indexedAccess(item);
        if (!r.indexed) return r;
      }
      return { indexed: true };
    }
  }
}

// ------------------------------------------------------------------ orderBy, select, pivotTo

export interface SortKey {
  property: string;
  descending: boolean;
  /** The primary key as text (the tie-breaker, and string keys). */
  pkColumn: boolean;
  indexed: boolean;
}

/**
 * `orderBy` of a query of `type`; the primary key (as text) always ends it, so that the order is
 * total and a page token can say where a page ended.
 */
export function parseOrderBy(type: ObjectType, raw: unknown, faults: QueryFaults, base = 'body/orderBy'): SortKey[] {
  const keys: SortKey[] = [];
  const list = raw === undefined ? [] : raw;
  if (!Array.isArray(list) || list.length > QUERY_LIMITS.orderBy) {
    faults.add(base, `must be an array of at most ${QUERY_LIMITS.orderBy} {property, direction}`);
    return keys;
  }
  for (const [i, item] of list.entries()) {
    const at = `${base}/${i}`;
    if (!isPlainObject(item) || typeof item.property !== 'string') {
      faults.add(at, 'must be {property, direction?: asc|desc}');
      continue;
    }
    const def = propertyOf(type, item.property);
    if (!def) {
      faults.add(`${at}/property`, `is not a property of ${type.apiName}`);
      continue;
    }
    const kind = kindOf(def.type);
    if (!SCALAR.has(kind)) {
      faults.add(`${at}/property`, `${item.property} is a ${kind}: it has no order`);
      continue;
    }
    const direction = item.direction ?? 'asc';
    if (direction !== 'asc' && direction !== 'desc') {
      faults.add(`${at}/direction`, 'must be asc or desc');
      continue;
    }
    const isPk = item.property === type.primaryKey;
    keys.push({
      property: item.property,
      descending: direction === 'desc',
      pkColumn: isPk && kind === 'string',
      indexed: isPk || def.indexed === true,
    });
  }
  if (!keys.some((k) => k.pkColumn)) {
    keys.push({ property: type.primaryKey, descending: keys[0]?.descending ?? false, pkColumn: true, indexed: true });
  }
  return keys;
}

/** The SQL expression of a sort key over alias `a`. */
export const sortExpr = (k: SortKey, ctx: SqlContext, a = 'r') =>
  k.pkColumn ? `${a}.pk` : valueExpr(ctx, a, k.property);

/**
 * ORDER BY of the keys: objects without a value last ascending, first descending (PostgreSQL's
 * default NULLS placement, as the list endpoint).
 */
export const orderSql = (keys: SortKey[], exprs: string[]) =>
  keys.map((k, i) => `${exprs[i]} ${k.descending ? 'DESC' : 'ASC'}`).join(', ');

/**
 * The rows after a page that ended at `last` (each key's value: JSON, or the pk text; null when
 * the object had none), in the order of orderSql.
 */
export function afterSql(keys: SortKey[], exprs: string[], last: unknown[], ctx: SqlContext): string {
  const ors: string[] = [];
  const equal: string[] = [];
  keys.forEach((k, i) => {
    const e = exprs[i] as string;
    const v = last[i] ?? null;
    // A parameter only for a value: an unused one would have no type PostgreSQL could infer.
    const value = v === null ? '' : k.pkColumn ? `${ctx.param(v)}::text` : `${ctx.param(JSON.stringify(v))}::jsonb`;
    let beyond: string | null;
    if (v === null) beyond = k.descending ? `${e} IS NOT NULL` : null;
    else beyond = k.descending ? `${e} < ${value}` : `(${e} > ${value} OR ${e} IS NULL)`;
    if (k.pkColumn && v !== null) beyond = `${e} ${k.descending ? '<' : '>'} ${value}`;
    if (beyond) ors.push(equal.length ? `(${[...equal, beyond].join(' AND ')})` : beyond);
    equal.push(v === null ? `${e} IS NULL` : `${e} = ${value}`);
  });
  return ors.length ? `(${ors.join(' OR ')})` : 'false';
}

/** `select`: known property names, or a fault. */
export function parseSelect(
  type: ObjectType,
  raw: unknown,
  faults: QueryFaults,
  base = 'body/select',
): string[] | null {
  if (raw === undefined) return null;
  if (!Array.isArray(raw)) {
    faults.add(base, 'must be an array of property names');
    return null;
  }
  for (const [i, name] of raw.entries()) {
    if (typeof name !== 'string' || !propertyOf(type, name)) {
      faults.add(`${base}/${i}`, `is not a property of ${type.apiName}`);
    }
  }
  return raw as string[];
}

/**
 * `pivotTo`: the objects reached from the set through the link types in turn, as a where-clause
 * over the last type: linked (through the last link type) to an object linked … to an object of
 * the set. Each step's side is the one the previous type is on.
 */
export function pivot(
  doc: SchemaDocument,
  start: ObjectType,
  where: WhereNode | null,
  steps: unknown,
  faults: QueryFaults,
  base = 'body/pivotTo',
): { type: ObjectType; where: WhereNode | null } | null {
  if (!Array.isArray(steps) || steps.length === 0 || steps.length > QUERY_LIMITS.pivotSteps) {
    faults.add(base, `must be an array of 1 to ${QUERY_LIMITS.pivotSteps} link types`);
    return null;
  }
  let type = start;
  let condition = where;
  for (const [i, linkType] of steps.entries()) {
    const at = `${base}/${i}`;
    const step =
      typeof linkType === 'string' ? linkStep(doc, type.apiName, linkType) : { error: 'must be a link type' };
    if ('error' in step) {
      faults.add(at, step.error);
      return null;
    }
    const target = typeOf(doc, step.target);
    if (!target) {
      faults.add(at, `links to ${step.target}, which is not in the schema`);
      return null;
    }
    // Seen from the target, the link is walked from the other side back to the set so far.
    condition = {
      kind: 'link',
      linkType: linkType as string,
      side: step.side === 'from' ? 'to' : 'from',
      target: type.apiName,
      where: condition,
      path: at,
    };
    type = target;
  }
  return { type, where: condition };
}

// ------------------------------------------------------------------ aggregations

export type GroupBy =
  | { property: string; type: 'exact'; maxGroups: number; kind: string }
  | { property: string; type: 'ranges'; ranges: { from?: number; to?: number }[]; kind: string }
  | { property: string; type: 'bucket'; interval: Interval; kind: string };
export const INTERVALS = ['hour', 'day', 'week', 'month', 'year'] as const;
export type Interval = (typeof INTERVALS)[number];
export const METRIC_OPS = ['count', 'sum', 'avg', 'min', 'max', 'approximateDistinct'] as const;
export interface Metric {
  name: string;
  op: (typeof METRIC_OPS)[number];
  property?: string;
  kind?: string;
}

export function parseGroupBy(type: ObjectType, raw: unknown, faults: QueryFaults, base = 'body/groupBy'): GroupBy[] {
  if (raw === undefined) return [];
  if (!Array.isArray(raw) || raw.length > QUERY_LIMITS.groupBy) {
    faults.add(base, `must be an array of at most ${QUERY_LIMITS.groupBy} groupings`);
    return [];
  }
  const out: GroupBy[] = [];
  const seen = new Set<string>();
  for (const [i, g] of raw.entries()) {
    const at = `${base}/${i}`;
    if (!isPlainObject(g) || typeof g.property !== 'string') {
      faults.add(at, 'must be {property, type: exact|ranges|bucket, …}');
      continue;
    }
    const def = propertyOf(type, g.property);
    if (!def) {
      faults.add(`${at}/property`, `is not a property of ${type.apiName}`);
      continue;
    }
    if (seen.has(g.property)) faults.add(`${at}/property`, 'groups the answer a second time');
    seen.add(g.property);
    const kind = kindOf(def.type);
    if (g.type === 'exact') {
      if (!SCALAR.has(kind)) {
        faults.add(`${at}/property`, `${g.property} is a ${kind}: it cannot be grouped by exact value`);
        continue;
      }
      const maxGroups = g.maxGroups ?? QUERY_LIMITS.defaultMaxGroups;
      if (!Number.isInteger(maxGroups) || (maxGroups as number) < 1 || (maxGroups as number) > QUERY_LIMITS.maxGroups) {
        faults.add(`${at}/maxGroups`, `must be an integer from 1 to ${QUERY_LIMITS.maxGroups}`);
        continue;
      }
      out.push({ property: g.property, type: 'exact', maxGroups: maxGroups as number, kind });
    } else if (g.type === 'ranges') {
      if (!NUMERIC.has(kind)) {
        faults.add(`${at}/property`, `${g.property} is a ${kind}: ranges group numbers only`);
        continue;
      }
      const ranges = g.ranges;
      if (!Array.isArray(ranges) || ranges.length === 0 || ranges.length > QUERY_LIMITS.ranges) {
        faults.add(`${at}/ranges`, `must be an array of 1 to ${QUERY_LIMITS.ranges} {from?, to?}`);
        continue;
      }
      let bad = false;
      for (const [j, r] of ranges.entries()) {
        const finite = (v: unknown) => v === undefined || (typeof v === 'number' && Number.isFinite(v));
        if (
          !isPlainObject(r) ||
          !finite(r.from) ||
          !finite(r.to) ||
          Object.keys(r).some((k) => k !== 'from' && k !== 'to')
        ) {
          faults.add(`${at}/ranges/${j}`, 'must be {from?: number, to?: number}');
          bad = true;
        } else if (typeof r.from === 'number' && typeof r.to === 'number' && r.from >= r.to) {
          faults.add(`${at}/ranges/${j}`, 'from must be less than to');
          bad = true;
        }
      }
      if (!bad)
        out.push({ property: g.property, type: 'ranges', ranges: ranges as { from?: number; to?: number }[], kind });
    } else if (g.type === 'bucket') {
      if (kind !== 'timestamp' && kind !== 'date') {
        faults.add(`${at}/property`, `${g.property} is a ${kind}: time buckets group timestamps and dates only`);
        continue;
      }
      if (!(INTERVALS as readonly unknown[]).includes(g.interval)) {
        faults.add(`${at}/interval`, `must be one of ${INTERVALS.join(', ')}`);
        continue;
      }
      out.push({ property: g.property, type: 'bucket', interval: g.interval as Interval, kind });
    } else {
      faults.add(`${at}/type`, 'must be exact, ranges or bucket');
    }
  }
  return out;
}

export function parseMetrics(type: ObjectType, raw: unknown, faults: QueryFaults, base = 'body/metrics'): Metric[] {
  if (!Array.isArray(raw) || raw.length === 0 || raw.length > QUERY_LIMITS.metrics) {
    faults.add(base, `must be an array of 1 to ${QUERY_LIMITS.metrics} metrics`);
    return [];
  }
  const out: Metric[] = [];
  const names = new Set<string>();
  for (const [i, m] of raw.entries()) {
    const at = `${base}/${i}`;
    if (!isPlainObject(m) || typeof m.name !== 'string' || !(METRIC_OPS as readonly unknown[]).includes(m.op)) {
      faults.add(at, `must be {name, op: ${METRIC_OPS.join('|')}, property?}`);
      continue;
    }
    if (names.has(m.name)) faults.add(`${at}/name`, 'is the name of another metric');
    names.add(m.name);
    const op = m.op as Metric['op'];
    if (op === 'count') {
      if (m.property !== undefined) faults.add(`${at}/property`, 'count counts objects: it takes no property');
      out.push({ name: m.name, op });
      continue;
    }
    const def = typeof m.property === 'string' ? propertyOf(type, m.property) : undefined;
    if (!def) {
      faults.add(
        `${at}/property`,
        m.property === undefined ? `is required for ${op}` : `is not a property of ${type.apiName}`,
      );
      continue;
    }
    const kind = kindOf(def.type);
    const fits =
      op === 'sum' || op === 'avg'
        ? NUMERIC.has(kind)
        : op === 'min' || op === 'max'
          ? ORDERED.has(kind)
          : SCALAR.has(kind);
    if (!fits) {
      faults.add(`${at}/property`, `${m.property} is a ${kind}: ${op} does not apply`);
      continue;
    }
    out.push({ name: m.name, op, property: m.property as string, kind });
  }
  return out;
}

/** SQL of a metric over the rows of alias `a`. */
export function metricSql(m: Metric, ctx: SqlContext, a = 'r'): string {
  if (m.op === 'count') return 'count(*)';
  const v = valueExpr(ctx, a, m.property as string);
  const number = `CASE WHEN jsonb_typeof(${v}) = 'number' THEN (${v})::numeric END`;
  const numeric = NUMERIC.has(m.kind as string);
  switch (m.op) {
    case 'sum':
      return `sum(${number})`;
    case 'avg':
      return `avg(${number})`;
    case 'min':
    case 'max':
      return numeric ? `${m.op}(${number})` : `${m.op}(${v} #>> '{}')`;
    default:
      return `count(DISTINCT ${v})`;
  }
}

/** SQL of a grouping key over alias `a` (ranges: the index of the range, from a join). */
export function groupKeySql(g: GroupBy, ctx: SqlContext, a = 'r'): string {
  const v = valueExpr(ctx, a, g.property);
  if (g.type === 'exact') return v;
  if (g.type === 'ranges') return '';
  // Normalised values (docs/adr/0008): `YYYY-MM-DDTHH:MM:SS.sssZ` and `YYYY-MM-DD`; anything
  // else (a value from an older schema) groups under null rather than failing the query.
  const text = `(${v} #>> '{}')`;
  if (g.kind === 'date') {
    return `CASE WHEN ${text} ~ '^\\d{4}-\\d{2}-\\d{2}$' THEN to_char(date_trunc(${ctx.param(g.interval)}, ${text}::date::timestamp), 'YYYY-MM-DD') END`;
  }
  return `CASE WHEN ${text} ~ '^\\d{4}-\\d{2}-\\d{2}T[0-9:.]+Z$' THEN to_char(date_trunc(${ctx.param(g.interval)}, (${text}::timestamptz AT TIME ZONE 'UTC')), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END`;
}
