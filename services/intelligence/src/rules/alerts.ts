import { newEvent, Outbox, type OutboxMessage, type Queryable, TOPICS, uuidv7 } from '@onto/shared';

export type Alert = {
  id: string;
  worldId: string;
  rule: string;
  ruleVersion: number;
  alertType: string;
  severity: string;
  objectType: string;
  pk: string;
  status: 'OPEN' | 'CLEARED';
  raisedAt: string;
  raisedObjectVersion: number;
  clearedAt: string | null;
  clearedObjectVersion: number | null;
  clearReason: string | null;
};

export const ALERT_COLUMNS = `id::text, world_id AS "worldId", rule, rule_version AS "ruleVersion",
  alert_type AS "alertType", severity, object_type AS "objectType", pk, status,
  to_json(raised_at)#>>'{}' AS "raisedAt", raised_object_version::float8 AS "raisedObjectVersion",
  to_json(cleared_at)#>>'{}' AS "clearedAt", cleared_object_version::float8 AS "clearedObjectVersion",
  clear_reason AS "clearReason"`;

export type ClearReason = 'condition false' | 'object deleted' | 'rule deleted' | 'rule changed';

/** An alert to raise: what it is about, and the object's version that raised it. */
export type NewAlert = Pick<
  Alert,
  'worldId' | 'rule' | 'ruleVersion' | 'alertType' | 'severity' | 'objectType' | 'pk'
> & {
  objectVersion: number;
};

function alertEvent(alert: Alert, seq: number, cause: string | undefined): OutboxMessage {
  const raised = alert.status === 'OPEN';
  const key = TOPICS['domain.alerts'].key({ worldId: alert.worldId, alertType: alert.alertType });
  return {
    event: newEvent({
      type: raised ? 'alert.raised' : 'alert.cleared',
      worldId: alert.worldId,
      key,
      version: raised ? 1 : 2,
      producer: 'intelligence',
      producerSeq: seq,
      payload: {
        alertId: alert.id,
        rule: alert.rule,
        ruleVersion: alert.ruleVersion,
        alertType: alert.alertType,
        severity: alert.severity,
        objectType: alert.objectType,
        pk: alert.pk,
        status: alert.status,
        raisedAt: alert.raisedAt,
        objectVersion: raised ? alert.raisedObjectVersion : alert.clearedObjectVersion,
        ...(raised ? {} : { clearedAt: alert.clearedAt, reason: alert.clearReason }),
        // The data change that made the condition flip, when one did (not `caused_by`: a
        // consumer of alerts need not consume data's changes, and would wait for it forever).
        ...(cause ? { changeEventId: cause } : {}),
      },
    }),
    key,
  };
}

/**
 * Opens alerts and enqueues their `alert.raised` in the caller's transaction. An object that
 * already has an open alert of the rule is skipped (the unique partial index decides), so that a
 * rule raises at most once while it stays true.
 */
export async function raiseAlerts(
  tx: Queryable,
  alerts: (NewAlert & { cause?: string | undefined })[],
  topicPrefix: string,
): Promise<Alert[]> {
  if (alerts.length === 0) return [];
  const { rows } = await tx.query<Alert & { seq: string }>(
    `INSERT INTO alerts (id, world_id, rule, rule_version, alert_type, severity, object_type, pk, status,
                         raised_object_version, raised_seq, raised_data_seq)
     SELECT id, world_id, rule, rule_version, alert_type, severity, object_type, pk, 'OPEN', ov,
            nextval('intelligence_seq'), rm_world_seq(world_id)
       FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[],
                   $9::bigint[]) AS u(id, world_id, rule, rule_version, alert_type, severity, object_type, pk, ov)
     ON CONFLICT (world_id, rule, object_type, pk) WHERE status = 'OPEN' DO NOTHING
     RETURNING ${ALERT_COLUMNS}, raised_seq AS seq`,
    [
      alerts.map(() => uuidv7()),
      alerts.map((a) => a.worldId),
      alerts.map((a) => a.rule),
      alerts.map((a) => a.ruleVersion),
      alerts.map((a) => a.alertType),
      alerts.map((a) => a.severity),
      alerts.map((a) => a.objectType),
      alerts.map((a) => a.pk),
      alerts.map((a) => a.objectVersion),
    ],
  );
  // One open alert per rule and object: that is what finds a row's cause.
  const openOn = (a: Pick<Alert, 'rule' | 'objectType' | 'pk'>) => `${a.rule}\u0000${a.objectType}\u0000${a.pk}`;
  const causes = new Map(alerts.map((a) => [openOn(a), a.cause]));
  await new Outbox(tx, topicPrefix).add(
    rows.map(({ seq, ...alert }) => alertEvent(alert, Number(seq), causes.get(openOn(alert)))),
  );
  return rows.map(({ seq: _, ...alert }) => alert);
}

/**
 * Clears open alerts of one world (by id) and enqueues their `alert.cleared`, with the object version at which
 * the condition stopped holding (null when the object is gone or the rule is).
 */
export async function clearAlerts(
  tx: Queryable,
  world: string,
  clears: { id: string; objectVersion: number | null; cause?: string | undefined }[],
  reason: ClearReason,
  topicPrefix: string,
): Promise<Alert[]> {
  if (clears.length === 0) return [];
  const { rows } = await tx.query<Alert & { seq: string }>(
    `UPDATE alerts SET status = 'CLEARED', cleared_at = now(), cleared_object_version = u.ov, clear_reason = $3,
                       cleared_seq = nextval('intelligence_seq'), cleared_data_seq = rm_world_seq(alerts.world_id)
       FROM unnest($1::uuid[], $2::bigint[]) AS u(alert_id, ov)
      WHERE alerts.world_id = $4 AND alerts.id = u.alert_id AND alerts.status = 'OPEN'
     RETURNING ${ALERT_COLUMNS}, cleared_seq AS seq`,
    [clears.map((c) => c.id), clears.map((c) => c.objectVersion), reason, world],
  );
  const causes = new Map(clears.map((c) => [c.id, c.cause]));
  await new Outbox(tx, topicPrefix).add(
    rows.map(({ seq, ...alert }) => alertEvent(alert, Number(seq), causes.get(alert.id))),
  );
  return rows.map(({ seq: _, ...alert }) => alert);
}

/** Open alerts of some objects of a type (of one rule, or of every rule): index probes by key. */
export async function openAlerts(
  tx: Queryable,
  worldId: string,
  objectType: string,
  pks: string[],
  rule?: string,
): Promise<{ id: string; rule: string; pk: string }[]> {
  if (pks.length === 0) return [];
  const { rows } = await tx.query<{ id: string; rule: string; pk: string }>(
    rule === undefined
      ? `SELECT a.id::text, a.rule, k.pk FROM unnest($3::text[]) AS k(pk)
          CROSS JOIN LATERAL (SELECT id, rule FROM alerts
                               WHERE world_id = $1 AND object_type = $2 AND pk = k.pk AND status = 'OPEN' OFFSET 0) a`
      : `SELECT a.id::text, $4::text AS rule, k.pk FROM unnest($3::text[]) AS k(pk)
          CROSS JOIN LATERAL (SELECT id FROM alerts
                               WHERE world_id = $1 AND rule = $4 AND object_type = $2 AND pk = k.pk
                                 AND status = 'OPEN' OFFSET 0) a`,
    rule === undefined ? [worldId, objectType, pks] : [worldId, objectType, pks, rule],
  );
  return rows;
}
