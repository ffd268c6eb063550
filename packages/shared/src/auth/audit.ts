import type { FastifyRequest } from 'fastify';
import type { Queryable } from '../messaging/outbox.js';

export interface AuditEntry {
  action: string;
  worldId?: string;
  subject?: string;
  detail?: Record<string, unknown>;
  /** Who acted, when the request has no principal yet (the token exchange); else the principal. */
  actor?: string;
}

/**
 * Records a write in audit_log (kernel migration 001): who, what, when, under which request.
 * Call it with the write's own transaction, so the record exists if and only if the write does.
 */
export async function recordAudit(
  tx: Queryable,
  request: Pick<FastifyRequest, 'id' | 'principal'>,
  entry: AuditEntry,
): Promise<void> {
  await tx.query(
    `INSERT INTO audit_log (actor, action, world_id, subject, request_id, detail)
     VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
    [
      request.principal?.userId ?? entry.actor ?? 'anonymous',
      entry.action,
      entry.worldId ?? null,
      entry.subject ?? null,
      String(request.id),
      JSON.stringify(entry.detail ?? {}),
    ],
  );
}
