/**
 * Object sets of a world at a commit (docs/adr/0047): the SQL that reads the live objects of a type
 * and the live links of a link type through a chain (docs/adr/0023), for the query and aggregate
 * endpoints; the where-clause itself comes from where.ts.
 *
 * A world is read at its commit `u` as two parts: its heads written by `u` (`seq <= u`), and, for
 * its heads written after `u`, the newest history row by `u` (found by the primary key of
 * history). The second part is found through the heads' `(world_id, seq)` index, so reading at a
 * recent commit costs the writes since, not the world's history: the first page of a query pins
 * the commit just cut, and writers keep writing while its pages are read.
 */
import type { Queryable } from '@onto/shared';
import {
  afterSql,
  compileWhere,
  type GroupBy,
  groupKeySql,
  linkPredicateSql,
  type Metric,
  metricSql,
  orderSql,
  type SortKey,
  type SqlContext,
  sortExpr,
  type WhereNode,
} from '@onto/shared';
import type { Segment } from '../worlds/refs.js';

/** Parameters of one statement. */
export class Params {
  readonly values: unknown[] = [];
  private readonly known = new Map<string, string>();
  /** Adds a value (strings and numbers once each: the same property name is one parameter). */
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

/** The chain a set is read through: every world at a commit (sets are always read at one). */
export type Chain = (Segment & { upTo: number })[];

/**
 * The branches (SELECTs of `r.pk, r.version, r.seq, r.properties`) of the live objects of `type`
 * through `chain`, each restricted by `where` (over alias `r`) and `extra` conditions on `r`.
 */
function objectBranches(p: Params, chain: Chain, type: string, conditions: string[]): string[] {
  const t = p.add(type);
  return chain.flatMap((seg, depth) => {
    const w = p.add(seg.world);
    const u = `${p.add(seg.upTo)}::bigint`;
    const shadows = chain.slice(0, depth).map((nearer) => {
      const nw = p.add(nearer.world);
      const nu = `${p.add(nearer.upTo)}::bigint`;
      // A key has history in a world only if it has a head there: one probe for keys never written.
      return `NOT EXISTS (SELECT 1 FROM object_heads s WHERE s.world_id = ${nw} AND s.type = ${t} AND s.pk = r.pk
             AND (s.seq <= ${nu} OR EXISTS (SELECT 1 FROM object_history x
                    WHERE x.world_id = ${nw} AND x.type = ${t} AND x.pk = r.pk AND x.seq <= ${nu})))`;
    });
    const where = ['NOT r.deleted', ...shadows, ...conditions].join(' AND ');
    return [
      `SELECT r.pk, r.version, r.seq, r.properties FROM object_heads r
        WHERE r.world_id = ${w} AND r.type = ${t} AND r.seq <= ${u} AND ${where}`,
      `SELECT r.pk, r.version, r.seq, r.properties
         FROM object_heads h
         CROSS JOIN LATERAL (
           SELECT x.pk, x.version, x.seq, x.properties, x.deleted FROM object_history x
            WHERE x.world_id = h.world_id AND x.type = h.type AND x.pk = h.pk AND x.seq <= ${u}
            ORDER BY x.seq DESC LIMIT 1) r
        WHERE h.world_id = ${w} AND h.type = ${t} AND h.seq > ${u} AND ${where}`,
    ];
  });
}

/**
 * The live links of `linkType` through `chain` (SELECTs of from_pk, to_pk): in each world, its
 * heads written by its point, and for the keys written after it (found through history's
 * `(world_id, seq)` index: history holds every link version, the current one too) the newest
 * version by its point; without the keys a nearer world wrote by its point.
 */
function linkBranches(p: Params, chain: Chain, linkType: string): string[] {
  const lt = p.add(linkType);
  return chain.flatMap((seg, depth) => {
    const w = p.add(seg.world);
    const u = `${p.add(seg.upTo)}::bigint`;
    const shadows = chain.slice(0, depth).map((nearer) => {
      const nw = p.add(nearer.world);
      const nu = `${p.add(nearer.upTo)}::bigint`;
      return `NOT EXISTS (SELECT 1 FROM link_history s WHERE s.world_id = ${nw} AND s.link_type = ${lt}
                 AND s.from_pk = l.from_pk AND s.to_pk = l.to_pk AND s.seq <= ${nu})`;
    });
    const shadowed = shadows.map((x) => ` AND ${x}`).join('');
    return [
      `SELECT l.from_pk, l.to_pk FROM link_heads l
        WHERE l.world_id = ${w} AND l.link_type = ${lt} AND l.seq <= ${u} AND NOT l.deleted${shadowed}`,
      `SELECT l.from_pk, l.to_pk
         FROM (SELECT DISTINCT n.from_pk, n.to_pk FROM link_history n
                WHERE n.world_id = ${w} AND n.seq > ${u} AND n.link_type = ${lt}) k
         CROSS JOIN LATERAL (
           SELECT x.from_pk, x.to_pk, x.deleted FROM link_history x
            WHERE x.world_id = ${w} AND x.link_type = ${lt} AND x.from_pk = k.from_pk AND x.to_pk = k.to_pk
              AND x.seq <= ${u} ORDER BY x.seq DESC LIMIT 1) l
        WHERE NOT l.deleted${shadowed}`,
    ];
  });
}

/** The SQL context of a statement reading through `chain`: links read there too. */
export function chainContext(p: Params, chain: Chain): SqlContext {
  const ctx: SqlContext = {
    param: p.add,
    linkExists: (link, outer, inner) =>
      linkPredicateSql(
        link,
        outer,
        linkBranches(p, chain, link.linkType),
        link.where === null ? null : objectBranches(p, chain, link.target, [inner('r')]),
      ),
  };
  return ctx;
}

export interface QueryRow {
  pk: string;
  version: number;
  properties: Record<string, unknown>;
  /** The sort keys' values (JSON values; the pk as text), for the page token. */
  keys: unknown[];
}

/**
 * One page of the live objects of `type` through `chain` matching `where`, in the order of `keys`,
 * after `after` (the keys of the previous page's last object).
 */
export async function queryPage(
  db: Queryable,
  q: { chain: Chain; type: string; where: WhereNode | null; keys: SortKey[]; after: unknown[] | null; limit: number },
): Promise<QueryRow[]> {
  const p = new Params();
  const ctx = chainContext(p, q.chain);
  const condition = compileWhere(q.where, ctx, 'r');
  const exprs = q.keys.map((k) => sortExpr(k, ctx, 'r'));
  const conditions = [condition];
  if (q.after) conditions.push(afterSql(q.keys, exprs, q.after, ctx));
  const order = orderSql(q.keys, exprs);
  const limit = `${p.add(q.limit)}::int`;
  const columns = exprs.map((e, i) => `${e} AS k${i}`).join(', ');
  // Each branch is ordered and limited on its own, so that each can walk an index and stop.
  const branches = objectBranches(p, q.chain, q.type, conditions).map(
    (b) =>
      `(${b.replace(/^SELECT r\.pk, r\.version, r\.seq, r\.properties/, `SELECT r.pk, r.version, r.properties, ${columns}`)} ORDER BY ${order} LIMIT ${limit})`,
  );
  const outer = q.keys.map((k, i) => `k${i} ${k.descending ? 'DESC' : 'ASC'}`).join(', ');
  const sqlText = `SELECT * FROM (${branches.join(' UNION ALL ')}) page ORDER BY ${outer} LIMIT ${limit}`;
  const { rows } = await db.query<Record<string, unknown>>(sqlText, p.values);
  return rows.map((row) => ({
    pk: row.pk as string,
    version: Number(row.version),
    properties: row.properties as Record<string, unknown>,
    keys: q.keys.map((_, i) => row[`k${i}`] ?? null), // own-key: column names k0… of this statement
  }));
}

/**
 * Rows of the type in the chain's worlds (their heads, any state), counted up to `limit + 1`: the
 * cost of a scan, bounded.
 */
export async function scanSize(db: Queryable, chain: Chain, type: string, limit: number): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM (SELECT 1 FROM object_heads WHERE world_id = ANY($1::text[]) AND type = $2 LIMIT $3) s`,
    [chain.map((s) => s.world), type, limit + 1],
  );
  return Number(rows[0]?.n ?? 0);
}

export interface GroupRow {
  key: Record<string, unknown>;
  metrics: Record<string, number | string | null>;
}

/**
 * The groups of the live objects of `type` through `chain` matching `where`, with their metrics,
 * at most `cap + 1` groups (the caller checks its limits), ordered by their keys.
 */
export async function aggregate(
  db: Queryable,
  q: { chain: Chain; type: string; where: WhereNode | null; groupBy: GroupBy[]; metrics: Metric[]; cap: number },
): Promise<GroupRow[]> {
  const p = new Params();
  const ctx = chainContext(p, q.chain);
  const condition = compileWhere(q.where, ctx, 'r');
  const joins: string[] = [];
  const keys = q.groupBy.map((g, i) => {
    if (g.type !== 'ranges') return `${groupKeySql(g, ctx, 'r')} AS g${i}`;
    // Each object counts in every range that holds it (from inclusive, to exclusive).
    const v = `CASE WHEN jsonb_typeof(r.properties -> ${p.add(g.property)}::text) = 'number' THEN (r.properties -> ${p.add(g.property)}::text)::numeric END`;
    joins.push(
      `JOIN unnest(${p.add(g.ranges.map((r) => r.from ?? null))}::numeric[], ${p.add(g.ranges.map((r) => r.to ?? null))}::numeric[])
         WITH ORDINALITY AS rg${i}(lo, hi, n)
         ON (rg${i}.lo IS NULL OR ${v} >= rg${i}.lo) AND (rg${i}.hi IS NULL OR ${v} < rg${i}.hi)`,
    );
    return `rg${i}.n AS g${i}`;
  });
  const metrics = q.metrics.map((m, i) => `${metricSql(m, ctx, 'r')} AS m${i}`);
  const set = objectBranches(p, q.chain, q.type, [condition]).join(' UNION ALL ');
  const groupCols = q.groupBy.map((_, i) => `g${i}`);
  const sql = `SELECT ${[...keys, ...metrics].join(', ')}
     FROM (${set}) r ${joins.join(' ')}
     ${groupCols.length ? `GROUP BY ${groupCols.join(', ')} ORDER BY ${groupCols.join(', ')} LIMIT ${p.add(q.cap + 1)}::int` : ''}`;
  const { rows } = await db.query<Record<string, unknown>>(sql, p.values);
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
        const numeric =
          m.op === 'count' ||
          m.op === 'approximateDistinct' ||
          m.op === 'sum' ||
          m.op === 'avg' ||
          m.kind === 'integer' ||
          m.kind === 'double';
        return [m.name, numeric ? Number(raw) : (raw as string)];
      }),
    ),
  }));
}
