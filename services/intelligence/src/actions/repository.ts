import type { CommandResult, Queryable, StepCommand, StepRefusal } from '@onto/shared';

export const ACTION_STATUSES = ['RUNNING', 'COMPENSATING', 'COMPLETED', 'COMPENSATED', 'FAILED'] as const;
export type ActionStatus = (typeof ACTION_STATUSES)[number];
export const STEP_STATES = [
  'PENDING',
  'REQUESTED',
  'COMPLETED',
  'REFUSED',
  'SKIPPED',
  'COMPENSATING',
  'COMPENSATED',
  'COMPENSATION_REFUSED',
] as const;
export type StepState = (typeof STEP_STATES)[number];

/** A refusal as the action keeps it: data's, and which step and phase it answered. */
export type RecordedRefusal = StepRefusal & { step: number; phase: 'forward' | 'compensation' };

export type ActionRow = {
  worldId: string;
  id: string;
  actionType: string;
  parameters: Record<string, unknown>;
  schemaVersion: number;
  status: ActionStatus;
  actor: string;
  idempotencyKey: string | null;
  causedBy: string | null;
  revision: number;
  refusal: RecordedRefusal | null;
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
};

export type StepRow = {
  n: number;
  command: StepCommand;
  state: StepState;
  requestEvent: string | null;
  result: CommandResult[] | null;
  refusal: StepRefusal | null;
  compensation: StepCommand[] | null;
  compensationResult: CommandResult[] | null;
  compensationRefusal: StepRefusal | null;
};

const ACTION_COLUMNS = `world_id AS "worldId", id::text, action_type AS "actionType", parameters,
  schema_version AS "schemaVersion", status, actor, idempotency_key AS "idempotencyKey",
  caused_by::text AS "causedBy", revision, refusal,
  to_json(created_at)#>>'{}' AS "createdAt", to_json(updated_at)#>>'{}' AS "updatedAt",
  to_json(finished_at)#>>'{}' AS "finishedAt"`;

const STEP_COLUMNS = `n, command, state, request_event::text AS "requestEvent", result, refusal, compensation,
  compensation_result AS "compensationResult", compensation_refusal AS "compensationRefusal"`;

export async function insertAction(
  tx: Queryable,
  a: Omit<ActionRow, 'revision' | 'refusal' | 'updatedAt' | 'finishedAt' | 'status'>,
  commands: StepCommand[],
  firstRequest: string,
): Promise<{ action: ActionRow; steps: StepRow[] }> {
  const { rows } = await tx.query<ActionRow>(
    `INSERT INTO actions (world_id, id, action_type, parameters, schema_version, status, actor, idempotency_key,
                          caused_by, created_at, updated_at)
     VALUES ($1, $2, $3, $4::jsonb, $5, 'RUNNING', $6, $7, $8, $9, $9)
     RETURNING ${ACTION_COLUMNS}`,
    [
      a.worldId,
      a.id,
      a.actionType,
      JSON.stringify(a.parameters),
      a.schemaVersion,
      a.actor,
      a.idempotencyKey,
      a.causedBy,
      a.createdAt,
    ],
  );
  const steps = await tx.query<StepRow>(
    `INSERT INTO action_steps (world_id, action_id, n, command, state, request_event)
     SELECT $1, $2, n - 1, c, CASE WHEN n = 1 THEN 'REQUESTED' ELSE 'PENDING' END, CASE WHEN n = 1 THEN $4::uuid END
       FROM unnest($3::jsonb[]) WITH ORDINALITY AS u(c, n)
     RETURNING ${STEP_COLUMNS}`,
    [a.worldId, a.id, commands.map((c) => JSON.stringify(c)), firstRequest],
  );
  return { action: rows[0] as ActionRow, steps: steps.rows.sort((x, y) => x.n - y.n) };
}

/** The action, locked for a transition, or null when there is none (its world was dropped). */
export async function lockAction(tx: Queryable, worldId: string, id: string): Promise<ActionRow | null> {
  const { rows } = await tx.query<ActionRow>(
    `SELECT ${ACTION_COLUMNS} FROM actions WHERE world_id = $1 AND id = $2 FOR UPDATE`,
    [worldId, id],
  );
  return rows[0] ?? null;
}

export async function stepsOf(db: Queryable, worldId: string, actionId: string): Promise<StepRow[]> {
  const { rows } = await db.query<StepRow>(
    `SELECT ${STEP_COLUMNS} FROM action_steps WHERE world_id = $1 AND action_id = $2 ORDER BY n`,
    [worldId, actionId],
  );
  return rows;
}

export async function getAction(db: Queryable, worldId: string, id: string): Promise<ActionRow | null> {
  const { rows } = await db.query<ActionRow>(`SELECT ${ACTION_COLUMNS} FROM actions WHERE world_id = $1 AND id = $2`, [
    worldId,
    id,
  ]);
  return rows[0] ?? null;
}

/**
 * Changes to a step; only the columns given are written. `replySeq` is data's write sequence a
 * completed reply named: where the action's next version stands on data's axis (migration 025).
 */
export async function updateStep(
  tx: Queryable,
  worldId: string,
  actionId: string,
  n: number,
  change: Partial<Omit<StepRow, 'n' | 'command'>> & { replySeq?: number },
): Promise<void> {
  const columns: Record<keyof typeof change, string> = {
    state: 'state',
    requestEvent: 'request_event',
    replySeq: 'reply_seq',
    result: 'result',
    refusal: 'refusal',
    compensation: 'compensation',
    compensationResult: 'compensation_result',
    compensationRefusal: 'compensation_refusal',
  };
  const sets: string[] = [];
  const values: unknown[] = [worldId, actionId, n];
  for (const [name, value] of Object.entries(change) as [keyof typeof change, unknown][]) {
    const plain = name === 'state' || name === 'requestEvent' || name === 'replySeq' || value === null;
    values.push(plain ? value : JSON.stringify(value));
    const cast =
      name === 'requestEvent' ? '::uuid' : name === 'replySeq' ? '::bigint' : name === 'state' ? '' : '::jsonb';
    sets.push(`${columns[name]} = $${values.length}${cast}`);
  }
  await tx.query(
    `UPDATE action_steps SET ${sets.join(', ')}, updated_at = now() WHERE world_id = $1 AND action_id = $2 AND n = $3`,
    values,
  );
}

/** Steps never reached once the saga turns back. */
export async function skipPending(tx: Queryable, worldId: string, actionId: string): Promise<void> {
  await tx.query(
    `UPDATE action_steps SET state = 'SKIPPED', updated_at = now()
      WHERE world_id = $1 AND action_id = $2 AND state = 'PENDING'`,
    [worldId, actionId],
  );
}

/** The action's next revision, with its new status (and refusal when given); returns the revision. */
export async function advanceAction(
  tx: Queryable,
  worldId: string,
  id: string,
  status: ActionStatus,
  refusal?: RecordedRefusal,
): Promise<number> {
  const final = status === 'COMPLETED' || status === 'COMPENSATED' || status === 'FAILED';
  const { rows } = await tx.query<{ revision: number }>(
    `UPDATE actions SET status = $3, revision = revision + 1, updated_at = now(),
            refusal = coalesce($4::jsonb, refusal), finished_at = CASE WHEN $5 THEN now() END
      WHERE world_id = $1 AND id = $2 RETURNING revision`,
    [worldId, id, status, refusal ? JSON.stringify(refusal) : null, final],
  );
  return rows[0]?.revision ?? 0;
}

export interface ListQuery {
  worldId: string;
  status?: ActionStatus;
  actionType?: string;
  actor?: string;
  /** Newer than this id is what the previous page ended with (ids are time-ordered, newest first). */
  before?: string;
  limit: number;
}

export async function listActions(db: Queryable, q: ListQuery): Promise<ActionRow[]> {
  const values: unknown[] = [q.worldId];
  const where = ['world_id = $1'];
  const add = (sql: string, value: unknown) => {
    values.push(value);
    where.push(sql.replace('?', `$${values.length}`));
  };
  if (q.status) add('status = ?', q.status);
  if (q.actionType) add('action_type = ?', q.actionType);
  if (q.actor) add('actor = ?', q.actor);
  if (q.before) add('id < ?::uuid', q.before);
  values.push(q.limit);
  const { rows } = await db.query<ActionRow>(
    `SELECT ${ACTION_COLUMNS} FROM actions WHERE ${where.join(' AND ')} ORDER BY id DESC LIMIT $${values.length}`,
    values,
  );
  return rows;
}

/** An action as a world lists it at a point: a base's, through a fork's chain, is inherited. */
export type ActionAt = ActionRow & { inherited: boolean };

/**
 * Where a read of actions stands (docs/adr/0078): a data commit and a moment (intelligence_seq);
 * null for either: no bound on that axis (now).
 */
export interface ActionPoint {
  commit: number | null;
  moment: number | null;
}

/**
 * The actions a world lists at a point (migration 025's `actions_at`): its own and, in a fork, its
 * bases' as of the fork point, each as its newest version by the point on both axes; filters on
 * the status then. Newest first by id.
 */
export async function listActionsAt(
  db: Queryable,
  q: ListQuery & { point: ActionPoint; id?: string },
): Promise<ActionAt[]> {
  const { rows } = await db.query<ActionAt>(
    `SELECT a.world_id AS "worldId", a.id::text, a.action_type AS "actionType", a.parameters,
            a.schema_version AS "schemaVersion", v.status, a.actor, a.idempotency_key AS "idempotencyKey",
            a.caused_by::text AS "causedBy", v.revision, v.refusal,
            to_json(a.created_at)#>>'{}' AS "createdAt", to_json(v.updated_at)#>>'{}' AS "updatedAt",
            to_json(v.finished_at)#>>'{}' AS "finishedAt", x.depth > 0 AS inherited
       FROM actions_at($1, $2, $3, $4) x
       JOIN actions a ON a.world_id = x.world_id AND a.id = x.action_id
       JOIN action_versions v ON v.world_id = x.world_id AND v.action_id = x.action_id AND v.revision = x.revision
      WHERE ($5::text IS NULL OR v.status = $5) AND ($6::text IS NULL OR a.action_type = $6)
        AND ($7::text IS NULL OR a.actor = $7) AND ($8::uuid IS NULL OR a.id < $8)
      ORDER BY a.id DESC LIMIT $9`,
    [
      q.worldId,
      q.point.commit,
      q.point.moment,
      q.id ?? null,
      q.status ?? null,
      q.actionType ?? null,
      q.actor ?? null,
      q.before ?? null,
      q.limit,
    ],
  );
  return rows;
}

/** An action's steps at one of its revisions: each step's newest version at or below it. */
export async function stepsAt(db: Queryable, worldId: string, actionId: string, revision: number): Promise<StepRow[]> {
  const { rows } = await db.query<StepRow>(
    `SELECT s.n, s.command, v.state, NULL AS "requestEvent", v.result, v.refusal, v.compensation,
            v.compensation_result AS "compensationResult", v.compensation_refusal AS "compensationRefusal"
       FROM (SELECT DISTINCT ON (n) * FROM action_step_versions
              WHERE world_id = $1 AND action_id = $2 AND revision <= $3 ORDER BY n, revision DESC) v
       JOIN action_steps s ON s.world_id = v.world_id AND s.action_id = v.action_id AND s.n = v.n
      ORDER BY v.n`,
    [worldId, actionId, revision],
  );
  return rows;
}

// ------------------------------------------------------------------ idempotency keys

export interface StoredResponse {
  status: number;
  body: unknown;
  headers: Record<string, string>;
}

export type KeyRecord = {
  fingerprint: string;
  actionId: string;
  response: StoredResponse;
  expiresAt: string;
};

export async function findKey(db: Queryable, worldId: string, scope: string, key: string): Promise<KeyRecord | null> {
  const { rows } = await db.query<KeyRecord>(
    `SELECT fingerprint, action_id::text AS "actionId", response, to_json(expires_at)#>>'{}' AS "expiresAt"
       FROM idempotency_keys WHERE world_id = $1 AND scope = $2 AND key = $3 AND expires_at > now()`,
    [worldId, scope, key],
  );
  return rows[0] ?? null;
}

/**
 * Records a key; null when it is taken — by a committed record, or by a concurrent transaction
 * that then committed (the insert waits for it). An expired record is replaced.
 */
export async function insertKey(
  tx: Queryable,
  k: { worldId: string; scope: string; key: string } & Omit<KeyRecord, 'expiresAt'>,
  ttlMs: number,
): Promise<KeyRecord | null> {
  const { rows } = await tx.query<{ expiresAt: string }>(
    `INSERT INTO idempotency_keys AS k (world_id, scope, key, fingerprint, action_id, response, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6::jsonb, now() + make_interval(secs => $7::float8 / 1000))
     ON CONFLICT (world_id, scope, key) DO UPDATE
        SET fingerprint = excluded.fingerprint, action_id = excluded.action_id, response = excluded.response,
            created_at = now(), expires_at = excluded.expires_at
      WHERE k.expires_at <= now()
     RETURNING to_json(expires_at)#>>'{}' AS "expiresAt"`,
    [k.worldId, k.scope, k.key, k.fingerprint, k.actionId, JSON.stringify(k.response), ttlMs],
  );
  const expiresAt = rows[0]?.expiresAt;
  return expiresAt ? { fingerprint: k.fingerprint, actionId: k.actionId, response: k.response, expiresAt } : null;
}

/** Deletes expired keys in bounded chunks; returns how many. */
export async function pruneKeys(db: Queryable, chunk = 5000): Promise<number> {
  let total = 0;
  for (;;) {
    const { rowCount } = await db.query(
      `DELETE FROM idempotency_keys WHERE ctid IN (
         SELECT ctid FROM idempotency_keys WHERE expires_at <= now() LIMIT $1)`,
      [chunk],
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < chunk) return total;
  }
}

/** Steps awaiting a reply for longer than `olderThanMs`, with their action locked (others skipped). */
export async function lockStalledSteps(
  tx: Queryable,
  olderThanMs: number,
  limit = 100,
): Promise<{ worldId: string; actionId: string; n: number; requestEvent: string }[]> {
  const { rows } = await tx.query<{ worldId: string; actionId: string; n: number; requestEvent: string }>(
    `SELECT s.world_id AS "worldId", s.action_id::text AS "actionId", s.n, s.request_event::text AS "requestEvent"
       FROM action_steps s JOIN actions a ON a.world_id = s.world_id AND a.id = s.action_id
      WHERE s.state IN ('REQUESTED', 'COMPENSATING')
        AND s.updated_at < now() - make_interval(secs => $1::float8 / 1000)
      ORDER BY s.updated_at LIMIT $2
        FOR UPDATE OF a SKIP LOCKED`,
    [olderThanMs, limit],
  );
  return rows;
}
