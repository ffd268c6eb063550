import { canonicalJson, newEvent, type OutboxMessage, type Queryable, TOPICS } from '@onto/shared';

/**
 * When data commits a write: the transaction's `now()` (the `written_at` of its rows), in UTC to
 * the microsecond, as change events carry it (`writtenAt`, docs/adr/0069).
 */
export const COMMIT_TIME = `to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/** The commit time of the caller's transaction (COMMIT_TIME). */
export async function commitTime(tx: Queryable): Promise<string> {
  const { rows } = await tx.query<{ at: string }>(`SELECT ${COMMIT_TIME} AS at`);
  return rows[0]?.at as string;
}

/** What every change event of a request carries about it. */
export interface Origin {
  actor: string;
  requestId: string;
  /**
   * The envelope's `caused_by`: an event onto issued that consumers wait for before this one
   * (an action's command, a checker's request). Never a client's word (docs/adr/0057).
   */
  causedBy: string | null;
  /** `X-Caused-By` of the request, when given: carried as the record's `x-caused-by` header, waited for by nobody. */
  claimedCause?: string | null;
  /**
   * The request's trace, when tracing is on: taken in its handler, since its events may be
   * written in another request's transaction (a write group, docs/adr/0015).
   */
  traceparent?: string | undefined;
}

/**
 * The record headers of an event of `origin`: its request, the cause its client named
 * (docs/adr/0057) and, when traced, its trace (docs/adr/0055).
 */
export function originHeaders(origin: Origin): Record<string, string> {
  const headers: Record<string, string> = { 'x-request-id': origin.requestId };
  if (origin.claimedCause) headers['x-caused-by'] = origin.claimedCause;
  if (origin.traceparent) headers.traceparent = origin.traceparent;
  return headers;
}

/** A change event of data's on `key`, caused by the request and carrying its id as a header. */
export function changeMessage(
  key: OutboxMessage['key'],
  type: Parameters<typeof newEvent>[0]['type'],
  change: { worldId: string; version: number; seq: number },
  payload: Record<string, unknown>,
  origin: Origin,
): OutboxMessage {
  return {
    event: newEvent({
      type,
      worldId: change.worldId,
      key,
      version: change.version,
      producer: 'data',
      producerSeq: change.seq,
      causedBy: origin.causedBy,
      payload,
    }),
    key,
    headers: originHeaders(origin),
  };
}

/**
 * `object.created|updated|deleted` on onto.changes.objects, keyed by world + type + pk so that
 * one object's events stay in one partition, in order. `version` is the object's version,
 * `producer_seq` the write's data_seq.
 */
export function objectChange(
  change: {
    worldId: string;
    type: string;
    pk: string;
    kind: 'created' | 'updated' | 'deleted';
    version: number;
    seq: number;
    before: Record<string, unknown> | null;
    after: Record<string, unknown> | null;
    schemaVersion: number;
    /** The commit time (COMMIT_TIME). */
    writtenAt?: string;
  },
  origin: Origin,
): OutboxMessage {
  const key = TOPICS['onto.changes.objects'].key({ worldId: change.worldId, objectType: change.type, pk: change.pk });
  return changeMessage(
    key,
    `object.${change.kind}`,
    change,
    {
      type: change.type,
      pk: change.pk,
      version: change.version,
      before: change.before,
      after: change.after,
      actor: origin.actor,
      requestId: origin.requestId,
      schemaVersion: change.schemaVersion,
      ...(change.writtenAt !== undefined && { writtenAt: change.writtenAt }),
    },
    origin,
  );
}

/** A link's own primary key: its two ends. */
export const linkPk = (fromPk: string, toPk: string) => `${encodeURIComponent(fromPk)}/${encodeURIComponent(toPk)}`;

/** `link.created|deleted` on onto.changes.links, keyed by world + link type + link pk. */
export function linkChange(
  change: {
    worldId: string;
    linkType: string;
    from: { type: string; pk: string };
    to: { type: string; pk: string };
    kind: 'created' | 'deleted';
    version: number;
    seq: number;
    /** The commit time (COMMIT_TIME). */
    writtenAt?: string;
  },
  origin: Origin,
): OutboxMessage {
  const pk = linkPk(change.from.pk, change.to.pk);
  const key = TOPICS['onto.changes.links'].key({ worldId: change.worldId, linkType: change.linkType, linkPk: pk });
  const ends = { from: change.from, to: change.to };
  return changeMessage(
    key,
    `link.${change.kind}`,
    change,
    {
      type: change.linkType,
      pk,
      ...ends,
      version: change.version,
      before: change.kind === 'created' ? null : ends,
      after: change.kind === 'created' ? ends : null,
      actor: origin.actor,
      requestId: origin.requestId,
      ...(change.writtenAt !== undefined && { writtenAt: change.writtenAt }),
    },
    origin,
  );
}

/** The parts of an object change event that differ from one object to the next. */
export type ChangeField = 'eventId' | 'key' | 'kind' | 'version' | 'seq' | 'pk' | 'before' | 'after';

const MARK = '\u0000';
const MARKED = /"\\u0000(\w+)\\u0000"/g;

/**
 * The canonical JSON body of `objectChange` as constant text around the fields that vary by
 * object: `parts[0] fields[0] parts[1] … fields[n-1] parts[n]`, each field to be spelled as JSON
 * (`eventId` and `key` as JSON strings, `kind` as the event type's JSON string). Derived from
 * `objectChange` itself, so a bulk write that fills it in (in SQL) writes the same bytes as
 * `canonicalJson(objectChange(…).event)`.
 */
export function objectChangeTemplate(
  c: { worldId: string; type: string; schemaVersion: number; writtenAt: string },
  origin: Origin,
  occurredAt: Date,
): { parts: string[]; fields: ChangeField[]; sample: OutboxMessage } {
  // A real event first: it checks the constant fields (world, type, origin) as every event is checked.
  const sample = objectChange({ ...c, pk: 'x', kind: 'created', version: 1, seq: 0, before: null, after: {} }, origin);
  const mark = (field: ChangeField) => `${MARK}${field}${MARK}`;
  const { event } = sample;
  const text = canonicalJson({
    ...event,
    event_id: mark('eventId'),
    key: mark('key'),
    type: mark('kind'),
    version: mark('version'),
    producer_seq: mark('seq'),
    occurred_at: occurredAt.toISOString(),
    payload: {
      ...event.payload,
      pk: mark('pk'),
      version: mark('version'),
      before: mark('before'),
      after: mark('after'),
    },
  });
  return { ...splitMarked<ChangeField>(text), sample };
}

/** Canonical JSON holding marks (`"\u0000field\u0000"`) as the constant parts around its fields. */
function splitMarked<Field extends string>(text: string): { parts: string[]; fields: Field[] } {
  const parts: string[] = [];
  const fields: Field[] = [];
  let at = 0;
  for (const m of text.matchAll(MARKED)) {
    parts.push(text.slice(at, m.index));
    fields.push(m[1] as Field);
    at = m.index + m[0].length;
  }
  parts.push(text.slice(at));
  return { parts, fields };
}

/** The parts of a series.points.written event that differ from one series (or chunk of points) to the next. */
export type SeriesPointsField = 'eventId' | 'key' | 'type' | 'pk' | 'series' | 'points';

/**
 * The canonical JSON body of a batch's `series.points.written` events as constant text around the
 * fields that vary by series, from a `sample` of them (series/events.ts), as objectChangeTemplate
 * does for object changes: a batch fills it in as outbox bundles, writing the same bytes as
 * `canonicalJson(seriesPointsWritten(…).event)` with the same occurred_at.
 */
export function seriesPointsTemplate(
  sample: OutboxMessage,
  occurredAt: Date,
): { parts: string[]; fields: SeriesPointsField[]; sample: OutboxMessage } {
  const mark = (field: SeriesPointsField) => `${MARK}${field}${MARK}`;
  const { event } = sample;
  const text = canonicalJson({
    ...event,
    event_id: mark('eventId'),
    key: mark('key'),
    occurred_at: occurredAt.toISOString(),
    payload: {
      ...event.payload,
      type: mark('type'),
      pk: mark('pk'),
      series: mark('series'),
      points: mark('points'),
    },
  });
  return { ...splitMarked<SeriesPointsField>(text), sample };
}
