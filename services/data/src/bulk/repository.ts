import {
  canonicalJson,
  copyField,
  copyLines,
  EVENT_KEY_MAX,
  laneOf,
  Outbox,
  StaleWriteError,
  TOPICS,
  uuidv7,
} from '@onto/shared';
import type pg from 'pg';
import { type ChangeField, commitTime, type Origin, objectChange, objectChangeTemplate } from '../events.js';
import { createdMeanwhile, HEAD_COPY, LOCK_HEADS, replaceHeads, takeSeqs } from '../objects/heads.js';
import type { Properties } from '../objects/model.js';

/** A checked row of a bulk write: its primary key and its normalised properties as canonical JSON. */
export interface BulkRow {
  pk: string;
  json: string;
}

export interface BulkResult {
  created: number;
  updated: number;
  unchanged: number;
  /** The highest seq among the heads after the write (written or left alone), 0 when none. */
  seq: number;
}

export interface BulkWriter {
  worldId: string;
  type: string;
  schemaVersion: number;
  /** The world is a fork: keys it has no head of continue its base's versions (docs/adr/0023). */
  forked?: boolean;
  origin: Origin;
  topicPrefix: string;
}

/** The fields of a new object's event, but its pk. */
const NEW = { kind: 'created', version: 1, seq: 0, before: null, after: {} } as const;
const stale = (w: BulkWriter) =>
  new StaleWriteError(`objects of ${w.worldId}/${w.type} were written concurrently with a bulk write`);

/** A row of the write with what its head and event need. */
interface Planned {
  row: BulkRow;
  key: string;
  version: number;
  /** The live head's properties as canonical JSON, or null when the object is new or deleted. */
  before: string | null;
  seq: number;
  /** The properties' canonical JSON escaped for COPY: the head and the event's `after`. */
  escaped: string;
}

/** A checked row of a bulk body with its line, for the duplicate check's report. */
export interface BulkInput extends BulkRow {
  line: number;
}

interface Head {
  pk: string;
  version: string;
  seq: string;
  deleted: boolean;
  properties: Properties | null;
}

/** Rows by pk; stable, so equal pks stay in line order. */
export function byNamedPk(a: BulkInput, b: BulkInput): number {
  if (a.pk === b.pk) return 0;
  return a.pk < b.pk ? -1 : 1;
}

/**
 * Creates or replaces the checked rows of a bulk body in the caller's transaction. `check`
 * refuses a pk given twice (seeing rows in byNamedPk order), records the fault and answers the
 * row, or null. Answers null when any row is faulty:
 * the caller then rolls back, and nothing is written. Every row travels once and is written once,
 * and Node's work overlaps PostgreSQL's (docs/adr/0016, 0017):
 *
 * 1. the tables are locked ROW EXCLUSIVE; the existing heads of the pks the rows name are locked
 *    in pk order (concurrent bulk writes cannot deadlock on them);
 * 2. a seq from data_seq for each row whose key has no head, taken after that lock, so that a
 *    commit cut (storage/commit.ts) still waits for this write;
 * 3. the new heads are COPYed in pk order, a pk given twice refused on its later line, and each
 *    new object's change event is made (a key created meanwhile is a unique violation: the write
 *    is retried as StaleWriteError); a row identical to its live head is left alone; after the
 *    first fault nothing more is copied, but every row is checked;
 * 4. replaced heads by one version-checked UPDATE, with seqs of their own, the versions they
 *    supersede kept in history (a new object has no history yet);
 * 5. the events, one per written object, as bundles of their lane (Outbox.bundles, each event
 *    encoded into its bundle as it is made): a row per bundle, not two per event.
 */
export async function writeBulk(
  tx: pg.PoolClient,
  w: BulkWriter,
  input: BulkInput[],
  check: (row: BulkInput) => BulkRow | null,
): Promise<BulkResult | null> {
  const result: BulkResult = { created: 0, updated: 0, unchanged: 0, seq: 0 };
  const keys = TOPICS['onto.changes.objects'];
  input.sort(byNamedPk); // the check's order: a pk given twice is reported on its later line
  const pks: string[] = [];
  for (const row of input) if (row.pk !== pks[pks.length - 1]) pks.push(row.pk);

  await tx.query(LOCK_HEADS);
  // Which of the pks have a head: first the heads between the least and the greatest of them (in
  // the database's collation), at most as many as the pks. New keys usually find none there,
  // where probing the index for every key costs 3-8 µs a key. When the span holds more heads
  // than that, every key is probed instead.
  let candidates = pks;
  if (pks.length > 0) {
    const { rows: inSpan } = await tx.query<{ pk: string }>(
      `WITH k AS (SELECT min(pk) AS lo, max(pk) AS hi FROM json_array_elements_text($3::json) AS j(pk))
       SELECT h.pk FROM k, object_heads h
        WHERE h.world_id = $1 AND h.type = $2 AND h.pk BETWEEN k.lo AND k.hi LIMIT $4`,
      [w.worldId, w.type, JSON.stringify(pks), pks.length],
    );
    if (inSpan.length < pks.length) {
      const ours = new Set(pks);
      candidates = inSpan.map((h) => h.pk).filter((pk) => ours.has(pk));
    }
  }
  // Those heads, locked in pk order. The keys as one array (computed once): as a subquery, a
  // planner that thinks the table tiny evaluated it once per head, 14 s for 10,000 keys.
  const { rows: heads } =
    candidates.length === 0
      ? { rows: [] as Head[] }
      : await tx.query<Head>(
          `SELECT h.pk, h.version, h.seq, h.deleted, h.properties FROM object_heads h
            WHERE h.world_id = $1 AND h.type = $2 AND h.pk = ANY (ARRAY(SELECT json_array_elements_text($3::json)))
            ORDER BY h.pk FOR NO KEY UPDATE`,
          [w.worldId, w.type, JSON.stringify(candidates)],
        );
  const existing = new Map(heads.map((h) => [h.pk, h]));
  // In a fork, the versions of its base at the fork point, for the keys it has no head of: a new
  // head of the fork continues them (it is still inserted, by the COPY below).
  const inherited = new Map<string, Head>();
  if (w.forked) {
    const { rows: found } = await tx.query<Head>(
      `SELECT k.pk, a.version, a.seq, a.deleted, a.properties
         FROM unnest($3::text[]) AS k(pk)
         JOIN worlds f ON f.id = $1
        CROSS JOIN LATERAL object_at(f.base_world, f.base_seq, $2, k.pk) a`,
      [w.worldId, w.type, pks.filter((pk) => !existing.has(pk))],
    );
    for (const h of found) inherited.set(h.pk, h);
  }
  const fresh = await takeSeqs(tx, pks.length - existing.size);
  let nextFresh = 0;

  // The change events: the template of their canonical body, and each field of it spelled as JSON
  // and escaped for COPY (the properties already are, for the heads).
  const template = objectChangeTemplate({ ...w, writtenAt: await commitTime(tx) }, w.origin, new Date());
  const fill: Record<ChangeField, (p: Planned, eventId: string) => string> = {
    eventId: (_p, id) => `"${id}"`,
    key: (p) => `"${p.key}"`,
    kind: (p) => (p.before === null ? '"object.created"' : '"object.updated"'),
    version: (p) => String(p.version),
    seq: (p) => String(p.seq),
    pk: (p) => copyField(JSON.stringify(p.row.pk)),
    before: (p) => (p.before === null ? 'null' : copyField(p.before)),
    after: (p) => p.escaped,
  };
  const getters = template.fields.map((f) => fill[f]);
  // Each event goes into its bundle as it is made: nothing of a new row outlives its turn.
  const bundles = new Outbox(tx, w.topicPrefix).bundles({
    sample: template.sample,
    parts: template.parts,
    escaped: true,
  });
  const eventOf = (p: Planned) => {
    const eventId = uuidv7();
    bundles.event(eventId, p.key, laneOf(p.key));
    for (const get of getters) bundles.value(get(p, eventId));
  };

  const world = copyField(w.worldId);
  const type = copyField(w.type);
  const schema = String(w.schemaVersion);
  const actor = copyField(w.origin.actor);
  const requestId = copyField(w.origin.requestId);
  const replaced: Planned[] = [];
  let faulty = false;
  try {
    await copyLines(
      tx,
      HEAD_COPY,
      (function* () {
        for (const item of input) {
          const row = check(item);
          if (row === null) faulty = true;
          if (row === null || faulty) continue;
          // A key too long for an event: refused as objectChange refuses it.
          const key = keys.key({ worldId: w.worldId, objectType: w.type, pk: row.pk });
          if (key.length > EVENT_KEY_MAX) objectChange({ ...w, ...NEW, pk: row.pk }, w.origin);
          const own = existing.get(row.pk);
          const h = own ?? inherited.get(row.pk);
          const before = h && !h.deleted && h.properties !== null ? canonicalJson(h.properties) : null;
          if (h && before === row.json) {
            result.unchanged++;
            result.seq = Math.max(result.seq, Number(h.seq));
            continue;
          }
          const p: Planned = { row, key, version: 1, before, seq: 0, escaped: copyField(row.json) };
          if (own) {
            p.version = Number(own.version) + 1;
            replaced.push(p);
            continue;
          }
          if (h) p.version = Number(h.version) + 1;
          p.seq = fresh[nextFresh++] as number; // one per pk without a head, so never short
          if (before === null) result.created++;
          else result.updated++;
          result.seq = Math.max(result.seq, p.seq);
          yield `${world}\t${type}\t${copyField(row.pk)}\t${p.version}\t${p.seq}\tf\t${p.escaped}\t${schema}\t${actor}\t${requestId}\n`;
          // Its event is made while PostgreSQL takes the row.
          eventOf(p);
        }
      })(),
    );
  } catch (error) {
    // A key created since the locking read (by a writer not yet committed then).
    if (createdMeanwhile(error)) throw stale(w);
    throw error;
  }
  if (faulty) return null;
  if (bundles.size === 0 && replaced.length === 0) return result;
  if (replaced.length > 0) {
    const seqs = await takeSeqs(tx, replaced.length);
    for (const [i, p] of replaced.entries()) {
      p.seq = seqs[i] as number;
      eventOf(p);
    }
    const list = replaced.map(
      (p) => `{"pk":${JSON.stringify(p.row.pk)},"version":${p.version},"seq":${p.seq},"props":${p.row.json}}`,
    );
    // The versions they supersede go to history (docs/adr/0017).
    const updated = await replaceHeads(
      tx,
      {
        worldId: w.worldId,
        type: w.type,
        schemaVersion: w.schemaVersion,
        actor: w.origin.actor,
        requestId: w.origin.requestId,
      },
      `[${list.join(',')}]`,
    );
    // The heads are locked, so this holds; a head that moved anyway is never written backwards.
    if (updated !== replaced.length) throw stale(w);
  }

  await bundles.write();

  for (const p of replaced) {
    // A head without a live version (deleted) is created again.
    if (p.before === null) result.created++;
    else result.updated++;
    result.seq = Math.max(result.seq, p.seq);
  }
  return result;
}
