import type { EventPayload } from '../inbox/handlers.js';
import type { Queryable } from '../outbox/outbox.js';

export type AuditPayload = EventPayload<'audit.recorded'>;

/**
 * The audit records in a service's outbox (docs/adr/0084), oldest first: what it publishes on
 * onto.audit, whether or not the relay has sent it yet; with `requestId`, that request's only.
 */
export async function outboxAudit(db: Queryable, requestId?: string): Promise<AuditPayload[]> {
  const { rows } = await db.query<{ body: string }>(
    `SELECT body FROM outbox WHERE topic LIKE '%onto.audit' AND bundle IS NULL ORDER BY id`,
  );
  return rows
    .map((r) => (JSON.parse(r.body) as { payload: AuditPayload }).payload)
    .filter((p) => requestId === undefined || p.requestId === requestId);
}
