import { type EventEnvelope, newEvent, type ProducerName } from '../events/envelope.js';
import type { AUDIT_RESULTS } from '../events/payloads.js';
import { TOPICS } from '../kafka/topics.js';
import { Outbox, type OutboxMessage, type Queryable } from './outbox.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The service this is: the producer of the audit records it writes (docs/adr/0084). */
    serviceName: ProducerName;
  }
}

export type AuditResult = (typeof AUDIT_RESULTS)[number];

export interface AuditEntry {
  /** What was done, `<what>.<verb>`: `object.put`, `world.create`. */
  action: string;
  result: AuditResult;
  worldId?: string | null;
  /** What was acted on within the world (or the platform): `Order/o-1`, a user, a token id. */
  subject?: string | null;
  beforeVersion?: number | null;
  afterVersion?: number | null;
  detail?: Record<string, unknown>;
  /** Who acted, when the request has no principal yet (the token exchange); else the principal. */
  actor?: string;
  /** The access token acted with, when the request has no principal yet: the one the exchange issues. */
  tokenId?: string;
}

/**
 * What of a request an audit record names: its id, its principal (auth's, here by its shape: the
 * outbox lies below auth), its service.
 */
export interface AuditedRequest {
  id: string;
  principal: { userId: string; tokenId: string } | null;
  server: { serviceName: ProducerName; topicPrefix: string };
}

/** Actions of no world are keyed, and carry world_id, `*` (docs/adr/0084). */
const NO_WORLD = '*';

/**
 * The audit.recorded event of a request's change (docs/adr/0084), for the change's own outbox
 * statement: a writer that already adds events adds this one with them, at no round trip.
 */
export function auditMessage(request: AuditedRequest, entry: AuditEntry): OutboxMessage<'audit.recorded'> {
  const world = entry.worldId ?? null;
  const requestId = String(request.id);
  const key = TOPICS['onto.audit'].key({ worldId: world ?? NO_WORLD });
  return {
    event: newEvent({
      type: 'audit.recorded',
      worldId: world ?? NO_WORLD,
      key,
      version: entry.afterVersion ?? 0,
      producer: request.server.serviceName,
      producerSeq: 0,
      payload: {
        actor: request.principal?.userId ?? entry.actor ?? 'anonymous',
        tokenId: request.principal?.tokenId ?? entry.tokenId ?? null,
        world,
        action: entry.action,
        target: entry.subject ?? null,
        requestId,
        result: entry.result,
        beforeVersion: entry.beforeVersion ?? null,
        afterVersion: entry.afterVersion ?? null,
        detail: entry.detail ?? {},
      },
    }) as EventEnvelope & { type: 'audit.recorded' },
    key,
    headers: { 'x-request-id': requestId },
  };
}

/**
 * Records a request's change as an audit.recorded event in `tx`'s outbox (docs/adr/0084): call it
 * with the change's own transaction, so that the record is published if and only if the change
 * commits, and exactly once per request.
 */
export async function recordAudit(tx: Queryable, request: AuditedRequest, entry: AuditEntry): Promise<void> {
  await new Outbox(tx, request.server.topicPrefix).add(auditMessage(request, entry));
}
