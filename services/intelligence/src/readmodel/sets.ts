/**
 * Object sets over intelligence's read model (docs/adr/0075): the SQL that reads the live objects
 * of a type, with their derived values, and the live links of a link type, through a fork's chain
 * at a data commit (migrations 014–016); the where-clause, orderBy, groupBy and metrics are data's
 * grammar and compiler (`@onto/shared`'s where.ts).
 *
 * A derived value is a field `derived.<name>` of the row the compiled SQL reads: the object's
 * properties merged with its derived values as `rm_derived_at` finds them (per name, the nearest
 * world's value by its point; failed evaluations are no value). Property names never hold a dot,
 * so the two never collide.
 *
 * A world is read at commit `u` as its rows written by `u` (`seq <= u`) and, for rows rewritten
 * since, the history row valid at `u` (`seq <= u < superseded_seq`). A fork's base is read at the
 * fork point, without the keys a nearer world had written by its own point.
 */
import {
  afterSql,
  compileWhere,
  type GroupBy,
  groupKeySql,
  linkPredicateSql,
  type Metric,
  metricSql,
  type ObjectType,
  orderSql,
  type PropertyDef,
  type PropertyType,
  type Queryable,
  type SchemaDocument,
  type SortKey,
  type SqlContext,
  setOwn,
  sortExpr,
  type WhereNode,
} from '@onto/shared';

/** The prefix of derived fields in where-clauses, orderBy, select, groupBy and metrics. */
export const DERIVED = 'derived.';

/** One world of a chain and the data commit it is read at. */
export interface Segment {
  world: string;
  upTo: number;
}

/** The chain of `world` read at commit `commit`: the world, then its bases at their fork points. */
export async function chainAt(db: Queryable, world: string, commit: number): Promise<Segment[]> {
  const { rows } = await db.query<{ world_id: string; point: string }>(
    'SELECT world_id, point::text AS point FROM rm_chain_at($1, $2::bigint) ORDER BY depth',
    [world, commit],
  );
  return rows.map((r) => ({ world: r.world_id, upTo: Number(r.point) }));
}

/** Parameters of one statement (strings and numbers once each). */
class Params {
  readonly values: unknown[] = [];
  private readonly known = new Map<string, string>();
  add = (value: unknown): string => {
    const key = typeof value === 'string' || typeof value === 'number' ? `${typeof value}:${value}` : undefined;
    const found = key === undefined ? undefined : this.known.get(key);
    if (found) return found;
    this.values.push(value);
    const placeholder = `$${this.values.length}`;
    if (key !== undefined) this.known.set(key, placeholder);
    return placeholder;
  };
}

/** A set read: the queried world and commit (derived values are found through its chain), its chain. */
export interface SetRead {
  world: string;
  commit: number;
  chain: Segment[];
  /** Whether the statement reads derived fields (else rows carry the properties alone). */
  derived: boolean;
}

/**
 * The branches (SELECTs of `r.pk, r.version, r.properties` with `extra` columns) of the live
 * objects of `type` through the chain, each restricted by `conditions` over alias `r`.
 */
function objectBranches(p: Params, s: SetRead, type: string, conditions: (string | null)[], extra = ''): string[] {
  const t = p.add(type);
  const w0 = p.add(s.world);
  const c0 = `${p.add(s.commit)}::bigint`;
  return s.chain.flatMap((seg, depth) => {
    const w = p.add(seg.world);
    const u = `${p.add(seg.upTo)}::bigint`;
    const shadows = s.chain.slice(0, depth).map((nearer) => {
      const nw = p.add(nearer.world);
      const nu = `${p.add(nearer.upTo)}::bigint`;
      // A nearer world decides a key it had written by its point, a tombstone too.
      return `NOT EXISTS (SELECT 1 FROM rm_objects s WHERE s.world_id = ${nw} AND s.type = ${t} AND s.pk = o.pk
             AND (s.seq <= ${nu} OR EXISTS (SELECT 1 FROM rm_objects_history x
                    WHERE x.world_id = ${nw} AND x.type = ${t} AND x.pk = o.pk AND x.seq <= ${nu})))`;
    });
    const own = ['NOT o.deleted', ...shadows].join(' AND ');
    const properties = s.derived
      ? `o.properties || coalesce((SELECT jsonb_object_agg(${p.add(DERIVED)} || d.name, d.value)
            FROM rm_derived_at(${w0}, ${c0}, ${t}, o.pk) d WHERE d.error IS NULL AND d.value IS NOT NULL), '{}'::jsonb)`
      : 'o.properties';
    const where = conditions.filter((c) => c !== null).join(' AND ') || 'true';
    const wrap = (rows: string) =>
      `SELECT r.pk, r.version, r.properties${extra} FROM (SELECT o.pk, o.version, ${properties} AS properties
         FROM ${rows}) r WHERE ${where}`;
    return [
      wrap(`rm_objects o WHERE o.world_id = ${w} AND o.type = ${t} AND o.seq <= ${u} AND ${own}`),
      wrap(`rm_objects_history o WHERE o.world_id = ${w} AND o.type = ${t} AND o.seq <= ${u}
              AND o.superseded_seq > ${u} AND ${own}`),
    ];
  });
}

/** The live links of `linkType` through the chain (SELECTs of from_pk, to_pk). */
function linkBranches(p: Params, s: SetRead, linkType: string): string[] {
  const lt = p.add(linkType);
  return s.chain.flatMap((seg, depth) => {
    const w = p.add(seg.world);
    const u = `${p.add(seg.upTo)}::bigint`;
    const shadows = s.chain.slice(0, depth).map((nearer) => {
      const nw = p.add(nearer.world);
      const nu = `${p.add(nearer.upTo)}::bigint`;
      return ` AND NOT EXISTS (SELECT 1 FROM rm_links s WHERE s.world_id = ${nw} AND s.link_type = ${lt}
                 AND s.from_pk = l.from_pk AND s.to_pk = l.to_pk
                 AND (s.seq <= ${nu} OR EXISTS (SELECT 1 FROM rm_links_history x WHERE x.world_id = ${nw}
                        AND x.link_type = ${lt} AND x.from_pk = l.from_pk AND x.to_pk = l.to_pk AND x.seq <= ${nu})))`;
    });
    const shadowed = shadows.join('');
    return [
      `SELECT l.from_pk, l.to_pk FROM rm_links l
        WHERE l.world_id = ${w} AND l.link_type = ${lt} AND l.seq <= ${u} AND NOT l.deleted${shadowed}`,
      `SELECT l.from_pk, l.to_pk FROM rm_links_history l
        WHERE l.world_id = ${w} AND l.link_type = ${lt} AND l.seq <= ${u} AND l.superseded_seq > ${u}
          AND NOT l.deleted${shadowed}`,
    ];
  });
}

function setContext(p: Params, s: SetRead): SqlContext {
  return {
    param: p.add,
    linkExists: (link, outer, inner) =>
      linkPredicateSql(
        link,
        outer,
        linkBranches(p, s, link.linkType),
        link.where === null ? null : objectBranches(p, s, link.target, [inner('r')]),
      ),
  };
}

export interface SetRow {
  pk: string;
  version: number;
  properties: Record<string, unknown>;
  derived: Record<string, unknown>;
  keys: unknown[];
}

/** Splits a row's merged fields into its properties and its derived values. */
function split(merged: Record<string, unknown>): {
  properties: Record<string, unknown>;
  derived: Record<string, unknown>;
} {
  const properties: Record<string, unknown> = {};
  const derived: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(merged)) {
    if (k.startsWith(DERIVED)) setOwn(derived, k.slice(DERIVED.length), v);
    else setOwn(properties, k, v);
  }
  return { properties, derived };
}

/** One page of the set, in the order of `keys`, after `after`; every row with its derived values. */
export async function queryPage(
  db: Queryable,
  s: SetRead,
  q: { type: string; where: WhereNode | null; keys: SortKey[]; after: unknown[] | null; limit: number },
): Promise<SetRow[]> {
  const p = new Params();
  // Rows carry their derived values: the answer shows them, whatever the query reads.
  const read: SetRead = { ...s, derived: true };
  const ctx = setContext(p, read);
  const conditions = [compileWhere(q.where, ctx, 'r')];
  const exprs = q.keys.map((k) => sortExpr(k, ctx, 'r'));
  if (q.after) conditions.push(afterSql(q.keys, exprs, q.after, ctx));
  const order = orderSql(q.keys, exprs);
  const limit = `${p.add(q.limit)}::int`;
  const columns = exprs.map((e, i) => `, ${e} AS k${i}`).join('');
  const branches = objectBranches(p, read, q.type, conditions, columns).map(
    (b) => `(${b} ORDER BY ${order} LIMIT ${limit})`,
  );
  const outer = q.keys.map((k, i) => `k${i} ${k.descending ? 'DESC' : 'ASC'}`).join(', ');
  const { rows } = await db.query<Record<string, unknown>>(
    `SELECT * FROM (${branches.join(' UNION ALL ')}) page ORDER BY ${outer} LIMIT ${limit}`,
    p.values,
  );
  return rows.map((row) => ({
    pk: row.pk as string,
    version: Number(row.version),
    ...split(row.properties as Record<string, unknown>),
    keys: q.keys.map((_, i) => row[`k${i}`] ?? null), // own-key: column names k0… of this statement
  }));
}

/** Rows of the type in the chain's worlds (any state), counted up to `limit + 1`. */
export async function scanSize(db: Queryable, chain: Segment[], type: string, limit: number): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM (SELECT 1 FROM rm_objects WHERE world_id = ANY($1::text[]) AND type = $2 LIMIT $3) s`,
    [chain.map((c) => c.world), type, limit + 1],
  );
  return Number(rows[0]?.n ?? 0);
}

export interface GroupRow {
  key: Record<string, unknown>;
  metrics: Record<string, number | string | null>;
}

/** The groups of the set with their metrics, at most `cap + 1`, ordered by their keys. */
export async function aggregate(
  db: Queryable,
  s: SetRead,
  q: { type: string; where: WhereNode | null; groupBy: GroupBy[]; metrics: Metric[]; cap: number },
): Promise<GroupRow[]> {
  const p = new Params();
  const ctx = setContext(p, s);
  const condition = compileWhere(q.where, ctx, 'r');
  const joins: string[] = [];
  const keys = q.groupBy.map((g, i) => {
    if (g.type !== 'ranges') return `${groupKeySql(g, ctx, 'r')} AS g${i}`;
    const v = `CASE WHEN jsonb_typeof(r.properties -> ${p.add(g.property)}::text) = 'number' THEN (r.properties -> ${p.add(g.property)}::text)::numeric END`;
    joins.push(
      `JOIN unnest(${p.add(g.ranges.map((r) => r.from ?? null))}::numeric[], ${p.add(g.ranges.map((r) => r.to ?? null))}::numeric[])
         WITH ORDINALITY AS rg${i}(lo, hi, n)
         ON (rg${i}.lo IS NULL OR ${v} >= rg${i}.lo) AND (rg${i}.hi IS NULL OR ${v} < rg${i}.hi)`,
    );
    return `rg${i}.n AS g${i}`;
  });
  const metrics = q.metrics.map((m, i) => `${metricSql(m, ctx, 'r')} AS m${i}`);
  const set = objectBranches(p, s, q.type, [condition]).join(' UNION ALL ');
  const groupCols = q.groupBy.map((_, i) => `g${i}`);
  const { rows } = await db.query<Record<string, unknown>>(
    `SELECT ${[...keys, ...metrics].join(', ')} FROM (${set}) r ${joins.join(' ')}
     ${groupCols.length ? `GROUP BY ${groupCols.join(', ')} ORDER BY ${groupCols.join(', ')} LIMIT ${p.add(q.cap + 1)}::int` : ''}`,
    p.values,
  );
  return rows.map((row) => ({
    key: Object.fromEntries(
      q.groupBy.map((g, i) => {
        const raw = row[`g${i}`] ?? null; // own-key: column names g0… of this statement
        if (g.type !== 'ranges') return [g.property, raw];
        const range = g.ranges[Number(raw) - 1] ?? {};
        return [
          g.property,
          { ...(range.from !== undefined && { from: range.from }), ...(range.to !== undefined && { to: range.to }) },
        ];
      }),
    ),
    metrics: Object.fromEntries(
      q.metrics.map((m, i) => {
        const raw = row[`m${i}`]; // own-key: column names m0… of this statement
        if (raw === null || raw === undefined) return [m.name, m.op === 'count' ? 0 : null];
        const numeric = m.op !== 'min' && m.op !== 'max' ? true : m.kind === 'integer' || m.kind === 'double';
        return [m.name, numeric ? Number(raw) : (raw as string)];
      }),
    ),
  }));
}

/** Whether a where-clause reads a derived field anywhere (its links' where-clauses too). */
export function readsDerived(node: WhereNode | null): boolean {
  if (node === null) return false;
  switch (node.kind) {
    case 'cmp':
      return node.property.startsWith(DERIVED);
    case 'link':
      return readsDerived(node.where);
    case 'not':
      return readsDerived(node.item);
    case 'and':
    case 'or':
      return node.items.some(readsDerived);
  }
}

/** The property type a derived value's CEL kind is queried as. */
function typeOfKind(kind: string | undefined): PropertyType {
  switch (kind) {
    case 'int':
    case 'uint':
    case 'double':
      // One rule for every number: CEL's int and double of one definition compare as numbers.
      return 'double';
    case 'string':
      return 'string';
    case 'bool':
      return 'boolean';
    default:
      // Lists, maps, bytes, or no value yet: only $isNull applies.
      return { type: 'struct', fields: {} };
  }
}

/**
 * The schema as a query over the read model sees it: every object type with a field
 * `derived.<name>` per derived property defined on it, typed by the CEL kind its values have in
 * the chain (docs/adr/0075). No field is indexed: the read model has no index on properties.
 */
export async function querySchema(
  db: Queryable,
  doc: SchemaDocument,
  definitions: { name: string; objectType: string }[],
  chain: Segment[],
): Promise<SchemaDocument> {
  const names = definitions.map((d) => d.name);
  const { rows } = await db.query<{ name: string; kind: string | null }>(
    `SELECT d.name, k.kind FROM unnest($2::text[]) d(name)
       LEFT JOIN LATERAL (SELECT v.value_kind AS kind FROM derived_values v
                           WHERE v.world_id = ANY($1::text[]) AND v.name = d.name AND v.error IS NULL
                             AND v.value_kind IS NOT NULL AND v.value_kind <> 'null' LIMIT 1) k ON true`,
    [chain.map((c) => c.world), names],
  );
  const kinds = new Map(rows.map((r) => [r.name, r.kind ?? undefined]));
  const objectTypes: Record<string, ObjectType> = {};
  for (const [name, type] of Object.entries(doc.objectTypes)) {
    const properties: Record<string, PropertyDef> = {};
    for (const [p, def] of Object.entries(type.properties)) setOwn(properties, p, { ...def, indexed: false });
    for (const d of definitions.filter((x) => x.objectType === name)) {
      setOwn(properties, `${DERIVED}${d.name}`, { type: typeOfKind(kinds.get(d.name)) });
    }
    setOwn(objectTypes, name, { ...type, properties });
  }
  return { ...doc, objectTypes };
}
