/**
 * Applying data's change events to the read model: per key, only a newer version replaces what
 * is stored (a replayed or reordered older event is a no-op); deletes leave tombstones. Each
 * function reports to the evaluation what really changed, so that nothing else is recomputed.
 */
import { canonicalJson, type EventEnvelope, type Statement } from '@onto/shared';
import type { Evaluation, StoredObject } from '../engine/evaluation.js';

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
    // link.announced re-states a live link (a recount): live, like link.created.
    live: event.type !== 'link.deleted',
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

/**
 * The batch's other versions of each key, each with the seq of the next version in the batch:
 * they go straight to history (docs/adr/0033), so that a fork point between two changes of one
 * batch reads the version it had. Usually none: a batch rarely holds a key twice.
 */
export function supersededInBatch<T extends { version: number; seq: number }>(
  changes: T[],
  key: (c: T) => string,
): { change: T; supersededSeq: number }[] {
  const byKey = new Map<string, T[]>();
  for (const c of changes) {
    const k = key(c);
    const list = byKey.get(k);
    if (list) list.push(c);
    else byKey.set(k, [c]);
  }
  const out: { change: T; supersededSeq: number }[] = [];
  for (const list of byKey.values()) {
    if (list.length < 2) continue;
    list.sort((a, b) => a.version - b.version);
    for (let i = 0; i + 1 < list.length; i++) {
      const [c, next] = [list[i] as T, list[i + 1] as T];
      if (c.version < next.version && c.seq < next.seq) out.push({ change: c, supersededSeq: next.seq });
    }
  }
  return out;
}

/** The top-level properties whose values differ. */
function changedProperties(before: Properties, after: Properties): Set<string> {
  const changed = new Set<string>();
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
    // Own values only: a property `constructor` one side lacks is absent there, not Object.
    const [had, has] = [Object.hasOwn(before, k), Object.hasOwn(after, k)];
    if (!had || !has || canonicalJson(before[k] ?? null) !== canonicalJson(after[k] ?? null)) {
      changed.add(k);
    }
  }
  return changed;
}

/** A read-model write of a batch: one statement, and what its answer tells the evaluation. */
export interface ReadModelWrite {
  statement: Statement;
  /** Tells the evaluation what really changed; answers how many keys took a newer version. */
  report(rows: Record<string, unknown>[], evaluation: Evaluation): number;
}

/** One key of `writeObjectChanges`' answer, in the order of the changes sent. */
interface ObjectRow extends StoredObject {
  /** The stored properties before the statement: null for no row or a tombstone. */
  before: Properties | null;
  /** Whether this change's version was written (it was newer). */
  written: boolean;
  /** After the statement: the row is a tombstone (properties null). */
  deleted: boolean;
  /** No stored row, and the world is a fork that inherits the object live. */
  inherited_live: boolean;
}

/**
 * The newest change per key, as one statement: the stored rows read, the newer versions written
 * (`WHERE o.version < EXCLUDED.version`), and the objects as they now are with their derived
 * values, so that the evaluation need not read them again. Every part reads the statement's
 * snapshot; the world's lock (taken by an earlier statement) keeps other writers of these rows out.
 */
export function writeObjectChanges(worldId: string, changes: ObjectChange[]): ReadModelWrite | undefined {
  if (changes.length === 0) return undefined;
  const keyOf = (c: ObjectChange) => `${c.type}\u0000${c.pk}`;
  const newest = [...newestPerKey(changes, keyOf).values()];
  const between = supersededInBatch(changes, keyOf);
  return {
    statement: {
      // `kept`: the stored version a newer one replaces goes to history, superseded at the seq of
      // the batch's first version after it; `mid`: the batch's own superseded versions.
      text: `WITH k AS (
         SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::jsonb[], $7::int[])
           WITH ORDINALITY AS u(type, pk, version, seq, properties, sv, n)
       ), mid AS (
         SELECT * FROM unnest($8::text[], $9::text[], $10::bigint[], $11::bigint[], $12::jsonb[], $13::bigint[])
           AS m(type, pk, version, seq, properties, superseded_seq)
       ), stored AS (
         SELECT k.n, o.version, o.seq, o.deleted, o.properties FROM k
          CROSS JOIN LATERAL (SELECT version, seq, deleted, properties FROM rm_objects
                               WHERE world_id = $1 AND type = k.type AND pk = k.pk OFFSET 0) o
       ), kept AS (
         INSERT INTO rm_objects_history (world_id, type, pk, version, seq, superseded_seq, deleted, properties)
         SELECT $1, k.type, k.pk, s.version, s.seq,
                coalesce((SELECT min(m.seq) FROM mid m WHERE m.type = k.type AND m.pk = k.pk AND m.version > s.version),
                         k.seq),
                s.deleted, s.properties
           FROM k JOIN stored s ON s.n = k.n
          WHERE s.version < k.version AND s.seq < k.seq
         UNION ALL
         SELECT $1, m.type, m.pk, m.version, m.seq, m.superseded_seq, m.properties IS NULL, m.properties FROM mid m
         ON CONFLICT DO NOTHING
       ), written AS (
         INSERT INTO rm_objects AS o (world_id, type, pk, version, seq, deleted, properties, schema_version)
         SELECT $1, k.type, k.pk, k.version, k.seq, k.properties IS NULL, k.properties, k.sv FROM k
         ON CONFLICT (world_id, type, pk) DO UPDATE
           SET version = EXCLUDED.version, seq = EXCLUDED.seq, deleted = EXCLUDED.deleted,
               properties = EXCLUDED.properties, schema_version = EXCLUDED.schema_version, updated_at = now()
           WHERE o.version < EXCLUDED.version
         RETURNING o.type, o.pk, o.version, o.seq, o.deleted, o.properties
       )
       SELECT k.pk, s.properties AS before, w.pk IS NOT NULL AS written,
              coalesce(w.version, s.version) AS version, coalesce(w.seq, s.seq) AS seq,
              coalesce(w.deleted, s.deleted) AS deleted,
              CASE WHEN w.pk IS NOT NULL THEN w.properties ELSE s.properties END AS properties,
              (SELECT jsonb_agg(jsonb_build_array(d.name, d.value, d.value_kind, d.error, d.source_seq))
                 FROM derived_values d
                WHERE d.world_id = $1 AND d.object_type = k.type AND d.pk = k.pk) AS derived,
              -- A fork's first write of a key: whether it inherits the object live (docs/adr/0033).
              CASE WHEN s.n IS NOT NULL OR NOT (SELECT EXISTS (SELECT 1 FROM world_bases WHERE world_id = $1)) THEN false
                   ELSE EXISTS (SELECT 1 FROM rm_object_at($1, k.type, k.pk) x WHERE NOT x.deleted) END
                AS inherited_live
         FROM k
         LEFT JOIN stored s ON s.n = k.n
         LEFT JOIN written w ON w.type = k.type AND w.pk = k.pk
        ORDER BY k.n`,
      values: [
        worldId,
        newest.map((c) => c.type),
        newest.map((c) => c.pk),
        newest.map((c) => c.version),
        newest.map((c) => c.seq),
        newest.map((c) => (c.properties === null ? null : JSON.stringify(c.properties))),
        newest.map((c) => c.schemaVersion),
        between.map((b) => b.change.type),
        between.map((b) => b.change.pk),
        between.map((b) => b.change.version),
        between.map((b) => b.change.seq),
        between.map((b) => (b.change.properties === null ? null : JSON.stringify(b.change.properties))),
        between.map((b) => b.supersededSeq),
      ],
    },
    report(answer, evaluation) {
      const rows = answer as unknown as ObjectRow[];
      const known = new Map<string, Map<string, StoredObject | null>>();
      let applied = 0;
      newest.forEach((c, i) => {
        const row = rows[i];
        if (!row || row.pk !== c.pk) throw new Error(`read-model answer out of step at ${c.type}/${c.pk}`);
        const ofType = known.get(c.type) ?? new Map<string, StoredObject | null>();
        known.set(c.type, ofType);
        ofType.set(c.pk, row.deleted !== false || row.properties === null ? null : row);
        if (!row.written) return;
        applied++;
        if (c.properties === null) {
          if (row.before !== null || row.inherited_live) evaluation.objectDeleted(c.type, c.pk, c.version, c.eventId);
        } else if (row.before === null) {
          // Created, or a fork's first write of an inherited object: everything is evaluated with
          // the fork's state, its rules too (an inherited open alert is then the fork's to raise).
          evaluation.objectChanged(c.type, c.pk, 'all', c.eventId);
        } else {
          const changed = changedProperties(row.before, c.properties);
          if (changed.size > 0) evaluation.objectChanged(c.type, c.pk, changed, c.eventId);
        }
      });
      for (const [type, objects] of known) evaluation.know(type, objects);
      return applied;
    },
  };
}

/** The same for links: the stored rows read and the newer versions written in one statement. */
export function writeLinkChanges(worldId: string, changes: LinkChange[]): ReadModelWrite | undefined {
  if (changes.length === 0) return undefined;
  const keyOf = (c: LinkChange) => `${c.linkType}\u0000${c.fromPk}\u0000${c.toPk}`;
  const newest = [...newestPerKey(changes, keyOf).values()];
  const between = supersededInBatch(changes, keyOf);
  return {
    statement: {
      text: `WITH k AS (
         SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::bool[])
           WITH ORDINALITY AS u(lt, fp, tp, ft, tt, version, seq, deleted, n)
       ), mid AS (
         SELECT * FROM unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::bigint[],
                              $16::bigint[], $17::bool[], $18::bigint[])
           AS m(lt, fp, tp, ft, tt, version, seq, deleted, superseded_seq)
       ), stored AS (
         SELECT k.n, l.version, l.seq, l.deleted, l.from_type, l.to_type FROM k
          CROSS JOIN LATERAL (SELECT version, seq, deleted, from_type, to_type FROM rm_links
                               WHERE world_id = $1 AND link_type = k.lt AND from_pk = k.fp AND to_pk = k.tp
                              OFFSET 0) l
       ), kept AS (
         INSERT INTO rm_links_history (world_id, link_type, from_pk, to_pk, from_type, to_type, version, seq,
                                       superseded_seq, deleted)
         SELECT $1, k.lt, k.fp, k.tp, s.from_type, s.to_type, s.version, s.seq,
                coalesce((SELECT min(m.seq) FROM mid m
                           WHERE m.lt = k.lt AND m.fp = k.fp AND m.tp = k.tp AND m.version > s.version), k.seq),
                s.deleted
           FROM k JOIN stored s ON s.n = k.n
          WHERE s.version < k.version AND s.seq < k.seq
         UNION ALL
         SELECT $1, m.lt, m.fp, m.tp, m.ft, m.tt, m.version, m.seq, m.superseded_seq, m.deleted FROM mid m
         ON CONFLICT DO NOTHING
       ), written AS (
         INSERT INTO rm_links AS l (world_id, link_type, from_pk, to_pk, from_type, to_type, version, seq, deleted)
         SELECT $1, k.lt, k.fp, k.tp, k.ft, k.tt, k.version, k.seq, k.deleted FROM k
         ON CONFLICT (world_id, link_type, from_pk, to_pk) DO UPDATE
           SET version = EXCLUDED.version, seq = EXCLUDED.seq, deleted = EXCLUDED.deleted,
               from_type = EXCLUDED.from_type, to_type = EXCLUDED.to_type, updated_at = now()
           WHERE l.version < EXCLUDED.version
         RETURNING l.link_type, l.from_pk, l.to_pk
       )
       SELECT k.fp, k.tp,
              CASE WHEN s.n IS NOT NULL THEN NOT s.deleted
                   WHEN NOT (SELECT EXISTS (SELECT 1 FROM world_bases WHERE world_id = $1)) THEN false
                   -- a fork's first write of a link: whether it inherits it live (docs/adr/0033)
                   ELSE EXISTS (SELECT 1 FROM rm_links_out_at($1, k.lt, k.fp) x WHERE x.to_pk = k.tp AND NOT x.deleted)
              END AS was_live,
              w.link_type IS NOT NULL AS written
         FROM k
         LEFT JOIN stored s ON s.n = k.n
         LEFT JOIN written w ON w.link_type = k.lt AND w.from_pk = k.fp AND w.to_pk = k.tp
        ORDER BY k.n`,
      values: [
        worldId,
        newest.map((c) => c.linkType),
        newest.map((c) => c.fromPk),
        newest.map((c) => c.toPk),
        newest.map((c) => c.fromType),
        newest.map((c) => c.toType),
        newest.map((c) => c.version),
        newest.map((c) => c.seq),
        newest.map((c) => !c.live),
        between.map((b) => b.change.linkType),
        between.map((b) => b.change.fromPk),
        between.map((b) => b.change.toPk),
        between.map((b) => b.change.fromType),
        between.map((b) => b.change.toType),
        between.map((b) => b.change.version),
        between.map((b) => b.change.seq),
        between.map((b) => !b.change.live),
        between.map((b) => b.supersededSeq),
      ],
    },
    report(answer, evaluation) {
      const rows = answer as unknown as { fp: string; tp: string; was_live: boolean; written: boolean }[];
      let applied = 0;
      newest.forEach((c, i) => {
        const row = rows[i];
        if (!row || row.fp !== c.fromPk || row.tp !== c.toPk) {
          throw new Error(`read-model answer out of step at ${c.linkType}/${c.fromPk}/${c.toPk}`);
        }
        if (!row.written) return;
        applied++;
        if (row.was_live !== c.live) evaluation.linkChanged(c.linkType, c.fromPk, c.toPk, c.eventId);
      });
      return applied;
    },
  };
}
