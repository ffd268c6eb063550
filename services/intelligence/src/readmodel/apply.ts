/**
 * Applying data's change events to the read model: per key, only a newer version replaces what
 * is stored (a replayed or reordered older event is a no-op); deletes leave tombstones. Each
 * function reports to the evaluation what really changed, so that nothing else is recomputed.
 */
import { canonicalJson, type EventEnvelope } from '@onto/shared';
import type pg from 'pg';
import type { Evaluation } from '../engine/evaluation.js';

type Properties = Record<string, unknown>;

interface ObjectChange {
  type: string;
  pk: string;
  version: number;
  seq: number;
  properties: Properties | null;
  schemaVersion: number;
  eventId: string;
}

interface LinkChange {
  linkType: string;
  fromType: string;
  fromPk: string;
  toType: string;
  toPk: string;
  version: number;
  seq: number;
  live: boolean;
  eventId: string;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown, what: string) => {
  if (typeof v !== 'string' || v === '') throw new TypeError(`${what} must be a non-empty string`);
  return v;
};
const int = (v: unknown, what: string) => {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new TypeError(`${what} must be an integer`);
  return v;
};

export function objectChangeOf(event: EventEnvelope): ObjectChange {
  const p = event.payload;
  const deleted = event.type === 'object.deleted';
  const after = p.after;
  if (!deleted && !isRecord(after)) throw new TypeError(`${event.type}: payload.after must be an object`);
  return {
    type: str(p.type, `${event.type}: payload.type`),
    pk: str(p.pk, `${event.type}: payload.pk`),
    version: int(p.version, `${event.type}: payload.version`),
    seq: event.producer_seq,
    properties: deleted ? null : (after as Properties),
    schemaVersion: typeof p.schemaVersion === 'number' ? p.schemaVersion : 0,
    eventId: event.event_id,
  };
}

export function linkChangeOf(event: EventEnvelope): LinkChange {
  const p = event.payload;
  const from = p.from;
  const to = p.to;
  if (!isRecord(from) || !isRecord(to))
    throw new TypeError(`${event.type}: payload.from and payload.to must be objects`);
  return {
    linkType: str(p.type, `${event.type}: payload.type`),
    fromType: str(from.type, `${event.type}: payload.from.type`),
    fromPk: str(from.pk, `${event.type}: payload.from.pk`),
    toType: str(to.type, `${event.type}: payload.to.type`),
    toPk: str(to.pk, `${event.type}: payload.to.pk`),
    version: int(p.version, `${event.type}: payload.version`),
    seq: event.producer_seq,
    live: event.type === 'link.created',
    eventId: event.event_id,
  };
}

/** The newest change per key: older ones in the same batch are superseded by it. */
function newestPerKey<T extends { version: number }>(changes: T[], key: (c: T) => string): Map<string, T> {
  const newest = new Map<string, T>();
  for (const c of changes) {
    const k = key(c);
    const prior = newest.get(k);
    if (!prior || prior.version < c.version) newest.set(k, c);
  }
  return newest;
}

/** The top-level properties whose values differ. */
function changedProperties(before: Properties, after: Properties): Set<string> {
  const changed = new Set<string>();
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (canonicalJson(before[k] ?? null) !== canonicalJson(after[k] ?? null) || !(k in before) || !(k in after)) {
      changed.add(k);
    }
  }
  return changed;
}

export async function applyObjectChanges(
  tx: pg.PoolClient,
  worldId: string,
  changes: ObjectChange[],
  evaluation: Evaluation,
): Promise<number> {
  if (changes.length === 0) return 0;
  const newest = [...newestPerKey(changes, (c) => `${c.type}\u0000${c.pk}`).values()];
  const { rows } = await tx.query<{ type: string; pk: string; version: string; properties: Properties | null }>(
    `SELECT k.type, k.pk, o.version, o.properties
       FROM unnest($2::text[], $3::text[]) AS k(type, pk)
      CROSS JOIN LATERAL (SELECT version, properties FROM rm_objects
                           WHERE world_id = $1 AND type = k.type AND pk = k.pk OFFSET 0) o`,
    [worldId, newest.map((c) => c.type), newest.map((c) => c.pk)],
  );
  const current = new Map(rows.map((r) => [`${r.type}\u0000${r.pk}`, r]));
  const applied = newest.filter((c) => {
    const stored = current.get(`${c.type}\u0000${c.pk}`);
    return !stored || Number(stored.version) < c.version;
  });
  if (applied.length === 0) return 0;
  await tx.query(
    `INSERT INTO rm_objects AS o (world_id, type, pk, version, seq, deleted, properties, schema_version)
     SELECT $1, u.type, u.pk, u.version, u.seq, u.properties IS NULL, u.properties, u.sv
       FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::jsonb[], $7::int[])
         AS u(type, pk, version, seq, properties, sv)
     ON CONFLICT (world_id, type, pk) DO UPDATE
       SET version = EXCLUDED.version, seq = EXCLUDED.seq, deleted = EXCLUDED.deleted,
           properties = EXCLUDED.properties, schema_version = EXCLUDED.schema_version, updated_at = now()
       WHERE o.version < EXCLUDED.version`,
    [
      worldId,
      applied.map((c) => c.type),
      applied.map((c) => c.pk),
      applied.map((c) => c.version),
      applied.map((c) => c.seq),
      applied.map((c) => (c.properties === null ? null : JSON.stringify(c.properties))),
      applied.map((c) => c.schemaVersion),
    ],
  );
  for (const c of applied) {
    const before = current.get(`${c.type}\u0000${c.pk}`)?.properties ?? null;
    if (c.properties === null) {
      if (before !== null) evaluation.objectDeleted(c.type, c.pk, c.version, c.eventId);
    } else if (before === null) {
      evaluation.objectChanged(c.type, c.pk, 'all', c.eventId);
    } else {
      const changed = changedProperties(before, c.properties);
      if (changed.size > 0) evaluation.objectChanged(c.type, c.pk, changed, c.eventId);
    }
  }
  return applied.length;
}

export async function applyLinkChanges(
  tx: pg.PoolClient,
  worldId: string,
  changes: LinkChange[],
  evaluation: Evaluation,
): Promise<number> {
  if (changes.length === 0) return 0;
  const newest = [...newestPerKey(changes, (c) => `${c.linkType}\u0000${c.fromPk}\u0000${c.toPk}`).values()];
  const { rows } = await tx.query<{
    link_type: string;
    from_pk: string;
    to_pk: string;
    version: string;
    deleted: boolean;
  }>(
    `SELECT k.link_type, k.from_pk, k.to_pk, l.version, l.deleted
       FROM unnest($2::text[], $3::text[], $4::text[]) AS k(link_type, from_pk, to_pk)
      CROSS JOIN LATERAL (SELECT version, deleted FROM rm_links
                           WHERE world_id = $1 AND link_type = k.link_type AND from_pk = k.from_pk AND to_pk = k.to_pk
                          OFFSET 0) l`,
    [worldId, newest.map((c) => c.linkType), newest.map((c) => c.fromPk), newest.map((c) => c.toPk)],
  );
  const current = new Map(rows.map((r) => [`${r.link_type}\u0000${r.from_pk}\u0000${r.to_pk}`, r]));
  const applied = newest.filter((c) => {
    const stored = current.get(`${c.linkType}\u0000${c.fromPk}\u0000${c.toPk}`);
    return !stored || Number(stored.version) < c.version;
  });
  if (applied.length === 0) return 0;
  await tx.query(
    `INSERT INTO rm_links AS l (world_id, link_type, from_pk, to_pk, from_type, to_type, version, seq, deleted)
     SELECT $1, u.lt, u.fp, u.tp, u.ft, u.tt, u.version, u.seq, u.deleted
       FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::bool[])
         AS u(lt, fp, tp, ft, tt, version, seq, deleted)
     ON CONFLICT (world_id, link_type, from_pk, to_pk) DO UPDATE
       SET version = EXCLUDED.version, seq = EXCLUDED.seq, deleted = EXCLUDED.deleted,
           from_type = EXCLUDED.from_type, to_type = EXCLUDED.to_type, updated_at = now()
       WHERE l.version < EXCLUDED.version`,
    [
      worldId,
      applied.map((c) => c.linkType),
      applied.map((c) => c.fromPk),
      applied.map((c) => c.toPk),
      applied.map((c) => c.fromType),
      applied.map((c) => c.toType),
      applied.map((c) => c.version),
      applied.map((c) => c.seq),
      applied.map((c) => !c.live),
    ],
  );
  for (const c of applied) {
    const stored = current.get(`${c.linkType}\u0000${c.fromPk}\u0000${c.toPk}`);
    const wasLive = stored !== undefined && !stored.deleted;
    if (wasLive !== c.live) evaluation.linkChanged(c.linkType, c.fromPk, c.toPk, c.eventId);
  }
  return applied.length;
}
