import type { Queryable } from '@onto/shared';
import type { WorldContext } from '../worlds/context.js';
import { protectionColumns, protectionOf } from '../worlds/protection.js';
import type { Segment } from '../worlds/refs.js';
import { type Filter, type Properties, SQL_OPS } from './model.js';

/** An object's current state in one world: what object_heads holds for its key. */
export interface Head {
  version: number;
  seq: number;
  deleted: boolean;
  properties: Properties | null;
  updatedAt: string;
  /**
   * A fork's view of an object it never wrote: its base's version at the fork point
   * (docs/adr/0023). The first write creates the world's own head from it (version + 1).
   */
  inherited?: boolean;
}

/** The world and the object's head, as a write or a read of one object sees them. */
export interface ObjectContext extends WorldContext {
  head: Head | null;
}

/** Row locks a read may take on the head: writers update it, link creators only need it to stay. */
export type HeadLock = 'none' | 'FOR NO KEY UPDATE' | 'FOR UPDATE';

/**
 * The world, its schema version and the object's head in one round trip. With a lock, the head
 * row is locked for the rest of the transaction (a concurrent writer's commit is waited for and
 * its result read).
 */
export async function objectContext(
  db: Queryable,
  worldId: string,
  type: string,
  pk: string,
  lock: HeadLock = 'none',
): Promise<ObjectContext> {
  const { rows } = await db.query<ContextRow>(contextSql(lock), [worldId, type, pk]);
  return contextOf(rows[0]);
}

/**
 * The version a fork inherits for a key it has no head of: its base's, read up the chain at the
 * fork point (docs/adr/0023). `world`, `type`, `pk` are SQL expressions; joined only when the
 * world's own head is missing, and a world without a base skips the chain at once.
 */
export const inheritedSql = (world: string, type: string, pk: string) => `LEFT JOIN LATERAL (
       SELECT a.version, a.seq, a.deleted, a.properties, to_json(a.written_at)#>>'{}' AS updated_at
         FROM worlds f CROSS JOIN LATERAL object_at(f.base_world, f.base_seq, ${type}, ${pk}) a
        WHERE f.id = ${world} AND f.base_world IS NOT NULL
     ) b ON h.version IS NULL`;

/** The head's columns of a context row: the world's own head, else the inherited version. */
export const CONTEXT_HEAD = `coalesce(h.version, b.version) AS version, coalesce(h.seq, b.seq) AS seq,
          coalesce(h.deleted, b.deleted) AS deleted, CASE WHEN h.version IS NULL THEN b.properties ELSE h.properties END AS properties,
          coalesce(h.updated_at, b.updated_at) AS updated_at, h.version IS NULL AND b.version IS NOT NULL AS inherited`;

/** The context query: $1 world, $2 type, $3 pk. */
export const contextSql = (lock: HeadLock) =>
  `SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) AS provisioned,
          (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = $1) AS schema_version,
          EXISTS (SELECT 1 FROM worlds WHERE id = $1 AND base_world IS NOT NULL) AS forked,
          ${protectionColumns('pw')},
          ${CONTEXT_HEAD}
     FROM (SELECT 1) AS one
     LEFT JOIN worlds pw ON pw.id = $1
     LEFT JOIN LATERAL (
       SELECT version, seq, deleted, properties, to_json(updated_at)#>>'{}' AS updated_at
         FROM object_heads WHERE world_id = $1 AND type = $2 AND pk = $3
         ${lock === 'none' ? '' : lock}
     ) h ON true
     ${inheritedSql('$1', '$2', '$3')}`;

export type ContextRow = {
  provisioned: boolean;
  forked?: boolean;
  schema_version: number;
  version: number | null;
  seq: number | string;
  deleted: boolean;
  properties: Properties | null;
  updated_at: string;
  inherited: boolean;
  require_merge?: boolean;
  allow_actions?: boolean;
};

/** The context a row of contextSql says. */
export function contextOf(row: ContextRow | undefined): ObjectContext {
  if (!row) throw new Error('the context query returned no row');
  return {
    provisioned: row.provisioned,
    ...(row.forked ? { forked: true } : {}),
    schemaVersion: row.schema_version,
    protection: protectionOf(row),
    head:
      row.version === null
        ? null
        : {
            version: row.version,
            seq: Number(row.seq),
            deleted: row.deleted,
            properties: row.properties,
            updatedAt: row.updated_at,
            ...(row.inherited ? { inherited: true } : {}),
          },
  };
}

export type ObjectRow = {
  pk: string;
  version: number;
  seq: number;
  properties: Properties;
  /** The sort property's stored value (null when the object has none), for the cursor. */
  sortValue: unknown;
};

export interface ListQuery {
  worldId: string;
  type: string;
  /** The worlds read and their commits (docs/adr/0023); absent: the world's own current heads. */
  chain?: Segment[];
  filters: Filter[];
  /** null sorts by primary key (as text). */
  sortProperty: string | null;
  descending: boolean;
  /** Where the previous page ended. */
  after: { value: unknown; pk: string } | null;
  limit: number;
}

/**
 * A page of live objects in keyset order. Sorting by a property orders by its stored JSON value
 * (the order of the property's index), objects without it last (first when descending), then by
 * pk. The two parts — objects with a value, objects without — are separate branches so that each
 * can walk an index. Through a chain (a fork, or a read at a commit) each world of the chain is
 * read at its commit, in the same order, without the keys a nearer world wrote by then, and the
 * parts merged: the page costs its rows and the keys a fork shadows, not the size of its bases.
 */
export async function listObjects(db: Queryable, q: ListQuery): Promise<ObjectRow[]> {
  const params: unknown[] = [q.worldId, q.type];
  const p = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  const chain = q.chain ?? [{ world: q.worldId, upTo: null }];
  const plain = chain.length === 1 && chain[0]?.world === q.worldId && chain[0]?.upTo === null;
  /**
   * Each world of the chain as sources `r` with their where clauses: its rows at its commit (its
   * heads; at a commit, also the history rows whose interval holds it, a source of their own so
   * that each walks its index in order and stops at the limit), without the keys a nearer world
   * wrote by its point.
   */
  const sources = chain.flatMap((seg, depth) => {
    const w = seg.world === q.worldId ? '$1' : p(seg.world);
    const shadows: string[] = [];
    for (const nearer of chain.slice(0, depth)) {
      const nw = nearer.world === q.worldId ? '$1' : p(nearer.world);
      if (nearer.upTo === null) {
        shadows.push(
          `NOT EXISTS (SELECT 1 FROM object_heads s WHERE s.world_id = ${nw} AND s.type = $2 AND s.pk = r.pk)`,
        );
      } else {
        // A key has history in a world only if it has a head there: one probe for keys never written.
        const nu = `${p(nearer.upTo)}::bigint`;
        shadows.push(
          `NOT EXISTS (SELECT 1 FROM object_heads s WHERE s.world_id = ${nw} AND s.type = $2 AND s.pk = r.pk
             AND (s.seq <= ${nu} OR EXISTS (SELECT 1 FROM object_history x
                    WHERE x.world_id = ${nw} AND x.type = $2 AND x.pk = r.pk AND x.seq <= ${nu})))`,
        );
      }
    }
    if (seg.upTo === null) return [{ from: 'object_heads r', where: [`r.world_id = ${w}`, ...shadows] }];
    const u = `${p(seg.upTo)}::bigint`;
    return [
      { from: 'object_heads r', where: [`r.world_id = ${w}`, `r.seq <= ${u}`, ...shadows] },
      {
        from: 'object_history r',
        where: [`r.world_id = ${w}`, `r.seq <= ${u}`, `r.superseded_seq > ${u}`, ...shadows],
      },
    ];
  });
  const common = ['r.type = $2', 'NOT r.deleted'];
  for (const f of q.filters) {
    const expr = `(r.properties -> ${p(f.property)}::text)`;
    common.push(`${expr} ${SQL_OPS[f.op]} ${p(JSON.stringify(f.value))}::jsonb`);
    if (f.op !== 'eq') common.push(`jsonb_typeof(${expr}) = ${p(f.jsonType)}`);
  }
  const columns = 'r.pk, r.version, r.seq, r.properties';
  const dir = q.descending ? 'DESC' : 'ASC';
  const cmp = q.descending ? '<' : '>';
  const limit = p(q.limit);
  /** One SELECT per world of the chain, merged (a single world: the SELECT itself). */
  const merged = (select: (from: string, where: string) => string, order: string) => {
    const parts = sources.map((src) => select(src.from, [...src.where, ...common].join(' AND ')));
    if (plain) return parts[0] as string;
    return `(SELECT * FROM (${parts.join(' UNION ALL ')}) merged ORDER BY ${order} LIMIT ${limit})`;
  };
  if (q.sortProperty === null) {
    const cursor = q.after ? ` AND r.pk ${cmp} ${p(q.after.pk)}` : '';
    const sql = merged(
      (from, where) =>
        `(SELECT ${columns}, NULL::jsonb AS "sortValue" FROM ${from} WHERE ${where}${cursor} ORDER BY r.pk ${dir} LIMIT ${limit})`,
      `pk ${dir}`,
    );
    const { rows } = await db.query<ObjectRow>(`SELECT * FROM ${sql} page ORDER BY pk ${dir} LIMIT ${limit}`, params);
    return rows;
  }
  const key = `(r.properties -> ${p(q.sortProperty)}::text)`;
  const withValue = (cursor: string) =>
    merged(
      (from, where) =>
        `(SELECT ${columns}, ${key} AS "sortValue", 1 AS part FROM ${from}
           WHERE ${where} AND ${key} IS NOT NULL ${cursor} ORDER BY ${key} ${dir}, r.pk ${dir} LIMIT ${limit})`,
      `"sortValue" ${dir}, pk ${dir}`,
    );
  const withoutValue = (cursor: string) =>
    merged(
      (from, where) =>
        `(SELECT ${columns}, NULL::jsonb AS "sortValue", 2 AS part FROM ${from}
           WHERE ${where} AND ${key} IS NULL ${cursor} ORDER BY r.pk ${dir} LIMIT ${limit})`,
      `pk ${dir}`,
    );
  // Ascending: values, then objects without; descending: the reverse.
  const parts: string[] = [];
  const after = q.after;
  if (after && after.value !== null) {
    const cursor = `AND (${key}, r.pk) ${cmp} (${p(JSON.stringify(after.value))}::jsonb, ${p(after.pk)})`;
    parts.push(withValue(cursor));
    if (!q.descending) parts.push(withoutValue(''));
  } else if (after) {
    parts.push(withoutValue(`AND r.pk ${cmp} ${p(after.pk)}`));
    if (q.descending) parts.push(withValue(''));
  } else {
    parts.push(q.descending ? withoutValue('') : withValue(''));
    parts.push(q.descending ? withValue('') : withoutValue(''));
  }
  const order = q.descending ? `part DESC, "sortValue" DESC, pk DESC` : `part, "sortValue", pk`;
  const { rows } = await db.query<ObjectRow & { part: number }>(
    `SELECT * FROM (${parts.join(' UNION ALL ')}) page ORDER BY ${order} LIMIT ${limit}`,
    params,
  );
  return rows.map(({ part: _, ...row }) => row);
}

/** One object of a world at a commit (null: now), read up the chain; null when it never was. */
export async function objectAt(
  db: Queryable,
  worldId: string,
  commit: number | null,
  type: string,
  pk: string,
): Promise<Head | null> {
  const { rows } = await db.query<{
    version: string;
    seq: string;
    deleted: boolean;
    properties: Properties | null;
    updated_at: string;
  }>(
    `SELECT version, seq, deleted, properties, to_json(written_at)#>>'{}' AS updated_at FROM object_at($1, $2, $3, $4)`,
    [worldId, commit, type, pk],
  );
  const row = rows[0];
  if (!row) return null;
  return {
    version: Number(row.version),
    seq: Number(row.seq),
    deleted: row.deleted,
    properties: row.properties,
    updatedAt: row.updated_at,
  };
}

export interface HistoryEntry {
  version: number;
  /** The data commit that wrote it. */
  seq: number;
  deleted: boolean;
  properties: Properties | null;
  schemaVersion: number;
  actor: string;
  writtenAt: string;
  /** The world that wrote it: this one, or a base it was inherited from. */
  world: string;
}

/**
 * Every version of one object a world sees, newest first, before commit `before` (null: from its
 * current head): its own versions, then each base's up to the fork point (world_chain), so a
 * fork's history goes on into its base's. Heads hold the current version, history the
 * superseded ones (docs/adr/0017); both are read by their primary keys.
 */
export async function objectHistory(
  db: Queryable,
  worldId: string,
  type: string,
  pk: string,
  before: number | null,
  limit: number,
): Promise<HistoryEntry[]> {
  const { rows } = await db.query<{
    version: string;
    seq: string;
    deleted: boolean;
    properties: Properties | null;
    schema_version: number;
    actor: string;
    written_at: string;
    world: string;
  }>(
    `SELECT v.* FROM world_chain($1, NULL) ch
       CROSS JOIN LATERAL (
         (SELECT h.version, h.seq, h.deleted, h.properties, h.schema_version, h.actor,
                 to_json(h.updated_at)#>>'{}' AS written_at, h.world_id AS world
            FROM object_heads h
           WHERE h.world_id = ch.world_id AND h.type = $2 AND h.pk = $3
             AND (ch.up_to IS NULL OR h.seq <= ch.up_to) AND ($4::bigint IS NULL OR h.seq < $4))
         UNION ALL
         (SELECT x.version, x.seq, x.deleted, x.properties, x.schema_version, x.actor,
                 to_json(x.written_at)#>>'{}', x.world_id
            FROM object_history x
           WHERE x.world_id = ch.world_id AND x.type = $2 AND x.pk = $3
             AND (ch.up_to IS NULL OR x.seq <= ch.up_to) AND ($4::bigint IS NULL OR x.seq < $4)
           ORDER BY x.seq DESC LIMIT $5)
       ) v
      ORDER BY v.seq DESC LIMIT $5`,
    [worldId, type, pk, before, limit],
  );
  return rows.map((r) => ({
    version: Number(r.version),
    seq: Number(r.seq),
    deleted: r.deleted,
    properties: r.properties,
    schemaVersion: r.schema_version,
    actor: r.actor,
    writtenAt: r.written_at,
    world: r.world,
  }));
}
