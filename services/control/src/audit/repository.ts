import { type EventPayload, isEvent, type ReceivedEvent, type Statement } from '@onto/shared';
import type pg from 'pg';

/** One audit record as GET /v1/audit answers it. */
export interface AuditRecord {
  eventId: string;
  recordedAt: string;
  service: string;
  world: string | null;
  actor: string;
  tokenId: string | null;
  action: string;
  target: string | null;
  requestId: string;
  result: string;
  beforeVersion: number | null;
  afterVersion: number | null;
  detail: Record<string, unknown>;
}

/**
 * The statement that stores a batch of audit.recorded events in the read model, sent with the
 * consumer's COMMIT; an event stored before (a redelivery the inbox did not catch) is skipped.
 */
export function storeAuditRecords(events: ReceivedEvent[]): Statement[] {
  const audits = events.map((r) => r.event).filter((e) => isEvent(e, 'audit.recorded'));
  if (audits.length === 0) return [];
  const payloads = audits.map((e) => e.payload as EventPayload<'audit.recorded'>);
  return [
    {
      text: `INSERT INTO audit_records (event_id, recorded_at, service, world_id, actor, token_id, action, target,
                                        request_id, result, before_version, after_version, detail)
             SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[],
                                  $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[],
                                  $13::jsonb[])
             ON CONFLICT (event_id) DO NOTHING`,
      values: [
        audits.map((e) => e.event_id),
        audits.map((e) => e.occurred_at),
        audits.map((e) => e.producer),
        payloads.map((p) => p.world),
        payloads.map((p) => p.actor),
        payloads.map((p) => p.tokenId),
        payloads.map((p) => p.action),
        payloads.map((p) => p.target),
        payloads.map((p) => p.requestId),
        payloads.map((p) => p.result),
        payloads.map((p) => p.beforeVersion),
        payloads.map((p) => p.afterVersion),
        payloads.map((p) => JSON.stringify(p.detail)),
      ],
    },
  ];
}

export interface AuditQuery {
  world?: string;
  actor?: string;
  action?: string;
  requestId?: string;
  from?: string;
  to?: string;
  /** The last record of the previous page: the page starts after it (older). */
  after?: { at: string; id: string };
  limit: number;
}

interface AuditRow {
  event_id: string;
  recorded_at: Date;
  service: string;
  world_id: string | null;
  actor: string;
  token_id: string | null;
  action: string;
  target: string | null;
  request_id: string;
  result: string;
  before_version: string | null;
  after_version: string | null;
  detail: Record<string, unknown>;
}

const version = (v: string | null) => (v === null ? null : Number(v));

/** Audit records matching every filter given, newest first, after the cursor; `from` inclusive, `to` exclusive. */
export async function listAuditRecords(db: pg.Pool | pg.PoolClient, q: AuditQuery): Promise<AuditRecord[]> {
  const { rows } = await db.query<AuditRow>(
    `SELECT event_id::text, recorded_at, service, world_id, actor, token_id, action, target, request_id, result,
            before_version::text, after_version::text, detail
       FROM audit_records
      WHERE ($1::text IS NULL OR world_id = $1)
        AND ($2::text IS NULL OR actor = $2)
        AND ($3::text IS NULL OR action = $3)
        AND ($4::text IS NULL OR request_id = $4)
        AND ($5::timestamptz IS NULL OR recorded_at >= $5)
        AND ($6::timestamptz IS NULL OR recorded_at < $6)
        AND ($7::timestamptz IS NULL OR (recorded_at, event_id) < ($7, $8::uuid))
      ORDER BY recorded_at DESC, event_id DESC
      LIMIT $9`,
    [
      q.world ?? null,
      q.actor ?? null,
      q.action ?? null,
      q.requestId ?? null,
      q.from ?? null,
      q.to ?? null,
      q.after?.at ?? null,
      q.after?.id ?? null,
      q.limit,
    ],
  );
  return rows.map((r) => ({
    eventId: r.event_id,
    recordedAt: r.recorded_at.toISOString(),
    service: r.service,
    world: r.world_id,
    actor: r.actor,
    tokenId: r.token_id,
    action: r.action,
    target: r.target,
    requestId: r.request_id,
    result: r.result,
    beforeVersion: version(r.before_version),
    afterVersion: version(r.after_version),
    detail: r.detail,
  }));
}
