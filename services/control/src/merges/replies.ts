/**
 * data's and intelligence's replies to a merge (docs/adr/0037, steps 2 to 5), applied by the
 * control-merges consumer under the merge's row lock: plans and conflicts, applies, failures,
 * compensations and verifications.
 */
import { type EventPayload, isEvent, type ReceivedEvent } from '@onto/shared';
import type pg from 'pg';
import {
  deadline,
  emit,
  type Failure,
  lockMerge,
  lockMergeOfPlan,
  type MergeRow,
  type PartRow,
  parts,
  SERVICES,
  type Service,
  updateMerge,
} from './repository.js';
import {
  afterPlans,
  compensate,
  endCompensation,
  onChecked,
  onStaged,
  type SagaContext,
  type Seen,
  sendBack,
  staleness,
} from './saga.js';

type DataReply =
  | 'merge.planned'
  | 'merge.conflicts.found'
  | 'merge.applied'
  | 'merge.failed'
  | 'merge.compensated'
  | 'merge.verified';
/** The payload of a reply of data's type `D`, or of intelligence's of the same kind. */
type Payload<D extends DataReply> = EventPayload<D> | EventPayload<`intelligence.${D}`>;

/** A reply of each kind, from data (merge.*) or intelligence (intelligence.merge.*), with its payload. */
type Reply =
  | { kind: 'planned'; service: Service; payload: Payload<'merge.planned'> }
  | { kind: 'conflicts.found'; service: Service; payload: Payload<'merge.conflicts.found'> }
  | { kind: 'applied'; service: Service; payload: Payload<'merge.applied'> }
  | { kind: 'failed'; service: Service; payload: Payload<'merge.failed'> }
  | { kind: 'compensated'; service: Service; payload: Payload<'merge.compensated'> }
  | { kind: 'verified'; service: Service; payload: Payload<'merge.verified'> }
  | { kind: 'staged'; service: 'data'; payload: EventPayload<'merge.staged'> }
  | { kind: 'checked'; service: 'intelligence'; payload: EventPayload<'intelligence.merge.checked'> };

/** A merge reply from data (onto.storage) or intelligence (onto.intelligence), or undefined. */
function replyOf(event: ReceivedEvent['event']): Reply | undefined {
  if (isEvent(event, 'merge.planned', 'intelligence.merge.planned')) {
    return { kind: 'planned', service: event.payload.service, payload: event.payload };
  }
  if (isEvent(event, 'merge.conflicts.found', 'intelligence.merge.conflicts.found')) {
    return { kind: 'conflicts.found', service: event.payload.service, payload: event.payload };
  }
  if (isEvent(event, 'merge.applied', 'intelligence.merge.applied')) {
    return { kind: 'applied', service: event.payload.service, payload: event.payload };
  }
  if (isEvent(event, 'merge.failed', 'intelligence.merge.failed')) {
    return { kind: 'failed', service: event.payload.service, payload: event.payload };
  }
  if (isEvent(event, 'merge.compensated', 'intelligence.merge.compensated')) {
    return { kind: 'compensated', service: event.payload.service, payload: event.payload };
  }
  if (isEvent(event, 'merge.verified', 'intelligence.merge.verified')) {
    return { kind: 'verified', service: event.payload.service, payload: event.payload };
  }
  if (isEvent(event, 'merge.staged')) return { kind: 'staged', service: 'data', payload: event.payload };
  if (isEvent(event, 'intelligence.merge.checked')) {
    return { kind: 'checked', service: 'intelligence', payload: event.payload };
  }
  return undefined;
}

/** Applies data's and intelligence's merge replies (steps 2 to 5), each under the merge's lock. */
export async function applyMergeReplies(tx: pg.ClientBase, events: ReceivedEvent[], ctx: SagaContext): Promise<void> {
  for (const { event } of events) {
    const reply = replyOf(event);
    if (!reply) continue;
    if (reply.kind === 'verified') {
      await recordVerification(tx, reply.service, reply.payload);
      continue;
    }
    if (reply.kind === 'staged' || reply.kind === 'checked') {
      const merge = await lockMergeOfPlan(tx, reply.payload.merge);
      if (!merge) continue;
      if (reply.kind === 'staged') await onStaged(tx, ctx, merge, reply.payload);
      else await onChecked(tx, ctx, merge, reply.payload);
      continue;
    }
    // Replies name the plan: one of a plan a proposal was sent back from finds no merge.
    const merge = await lockMergeOfPlan(tx, reply.payload.merge);
    if (!merge) continue;
    await onReply(tx, ctx, merge, reply);
  }
  await sendBackStale(tx, ctx, events);
}

/**
 * Proposals whose target or source was written after their plan read it (docs/adr/0085), as the
 * positions data and intelligence announce say (storage.position, intelligence.rules.changed,
 * storage.schema.updated): each is sent back for a new plan, its approvals void.
 */
async function sendBackStale(tx: pg.ClientBase, ctx: SagaContext, events: ReceivedEvent[]): Promise<void> {
  const seen = new Map<string, Seen>();
  const at = (world: string) => seen.get(world) ?? (seen.set(world, {}).get(world) as Seen);
  for (const { event } of events) {
    if (isEvent(event, 'storage.position')) {
      const s = at(event.world_id);
      s.dataSeq = Math.max(s.dataSeq ?? 0, event.payload.seq);
    } else if (isEvent(event, 'intelligence.rules.changed')) {
      const s = at(event.world_id);
      s.definitions = Math.max(s.definitions ?? 0, event.payload.definitions);
    } else if (isEvent(event, 'storage.schema.updated')) {
      at(event.world_id);
    }
  }
  if (seen.size === 0) return;
  const { rows } = await tx.query<{ id: string }>(
    `SELECT id FROM merges WHERE status = 'PROPOSED' AND phase = 'proposed' AND (target = ANY($1) OR source = ANY($1))
      ORDER BY id`,
    [[...seen.keys()]],
  );
  for (const { id } of rows) {
    const merge = await lockMerge(tx, id);
    if (merge?.status !== 'PROPOSED' || merge.phase !== 'proposed') continue;
    const why = await staleness(tx, merge, seen);
    if (why) await sendBack(tx, ctx, merge, why);
  }
}

async function onReply(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow, reply: Reply): Promise<void> {
  const { service } = reply;
  const set = (state: PartRow['state'], from: PartRow['state'][], columns: Record<string, unknown>) =>
    tx.query(
      `UPDATE merge_parts SET state = $3, updated_at = now(), ${Object.keys(columns)
        .map((c, i) => `${c} = $${i + 5}`)
        .join(', ')}
        WHERE merge_id = $1 AND service = $2 AND state = ANY($4::text[])`,
      [merge.id, service, state, from, ...Object.values(columns)],
    );
  switch (reply.kind) {
    case 'conflicts.found':
      await recordConflicts(tx, merge, reply.payload.conflicts);
      return;
    case 'planned': {
      const payload = reply.payload;
      await tx.query(
        `INSERT INTO merge_parts (merge_id, service, state, source_pos, target_pos, changes, conflicts)
         VALUES ($1, $2, 'planned', $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
        [merge.id, service, payload.source, payload.target, payload.changes, payload.conflicts],
      );
      await updateMerge(tx, merge.id, {
        [service === 'data' ? 'source_data_seq' : 'source_definitions']: payload.source,
      });
      if (merge.phase === 'planning') await afterPlans(tx, ctx, merge);
      return;
    }
    case 'applied': {
      const payload = reply.payload;
      const moved = (await set('applied', ['planned'], { target_pos: payload.target, applied: payload.applied }))
        .rowCount;
      if (merge.phase === 'applying') {
        const ps = await parts(tx, merge.id);
        if (SERVICES.every((s) => ps.some((p) => p.service === s && p.state === 'applied'))) {
          const pos = (s: Service) => Number(ps.find((p) => p.service === s)?.target_pos);
          await updateMerge(tx, merge.id, {
            status: 'MERGED',
            phase: 'done',
            deadline_at: null,
            result: {
              schemaVersion: merge.applied_schema_version ?? merge.target_schema_version,
              dataSeq: pos('data'),
              definitions: pos('intelligence'),
            },
          });
        }
      } else if (moved && merge.status !== 'MERGED' && (merge.phase === 'compensating' || merge.phase === 'done')) {
        // Applied after the compensation was asked (or after the merge ended without it): undone too.
        await updateMerge(tx, merge.id, { phase: 'compensating', deadline_at: deadline(ctx.timeoutMs) });
        await emit(tx, ctx.topicPrefix, 'world.merge.compensate', merge.target, {
          merge: merge.plan_id,
          reason: `${service} applied its part after the merge had failed`,
        });
      }
      return;
    }
    case 'failed': {
      const payload = reply.payload;
      // A verification that could not run says nothing about the merge's parts.
      if (payload.phase === 'verify') return;
      const failure: Failure = {
        service,
        phase: payload.phase,
        status: payload.status,
        reason: payload.reason,
        ...(payload.field ? { field: payload.field } : {}),
      };
      await tx.query(
        `INSERT INTO merge_parts (merge_id, service, state, failure) VALUES ($1, $2, 'failed', $3)
         ON CONFLICT (merge_id, service) DO UPDATE SET state = 'failed', failure = $3, updated_at = now()
          WHERE merge_parts.state IN ('planned', 'applied')`,
        [merge.id, service, failure],
      );
      const withFailure = { ...merge, failure: merge.failure ?? failure };
      if (!merge.failure) await updateMerge(tx, merge.id, { failure });
      if (merge.phase === 'planning' || merge.phase === 'conflicts') {
        await updateMerge(tx, merge.id, { status: 'FAILED', phase: 'done', deadline_at: null });
      } else if (merge.phase === 'applying') {
        await compensate(tx, ctx, withFailure, `${service} failed to apply: ${failure.reason}`);
      } else if (merge.phase === 'compensating') {
        await endCompensation(tx, withFailure);
      }
      return;
    }
    case 'compensated':
      await set('compensated', ['planned', 'applied', 'failed'], {
        reverted: reply.payload.reverted,
        not_reverted: JSON.stringify(reply.payload.notReverted ?? []),
      });
      if (merge.phase === 'compensating') await endCompensation(tx, merge);
      return;
  }
}

/**
 * Conflicts data and intelligence found. A strategy other than MANUAL settles them (the service
 * applies it); an object that fails the merged schema needs a person whatever the strategy.
 */
async function recordConflicts(
  tx: pg.ClientBase,
  merge: MergeRow,
  conflicts: EventPayload<'merge.conflicts.found'>['conflicts'],
) {
  for (const c of conflicts) {
    const needsPerson = c.type === 'SCHEMA_CONFLICT';
    const settled = merge.strategy !== 'MANUAL' && !needsPerson;
    const take = !settled
      ? null
      : merge.strategy === 'SOURCE_WINS'
        ? 'source'
        : merge.strategy === 'TARGET_WINS'
          ? 'target'
          : timestampTake(c.sourceAt ?? null, c.targetAt ?? null);
    await tx.query(
      `INSERT INTO merge_conflicts (merge_id, id, type, entity, base, source, target, source_at, target_at, reason,
                                    needs_person, resolution_take, resolved_by, resolved_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, CASE WHEN $13::text IS NULL THEN NULL ELSE now() END)
       ON CONFLICT (merge_id, id) DO NOTHING`,
      [
        merge.id,
        c.id,
        c.type,
        c.entity,
        JSON.stringify(c.base ?? null),
        JSON.stringify(c.source ?? null),
        JSON.stringify(c.target ?? null),
        c.sourceAt ?? null,
        c.targetAt ?? null,
        c.reason ?? null,
        needsPerson,
        take,
        settled ? `strategy:${merge.strategy}` : null,
      ],
    );
  }
}

/** The side TIMESTAMP_WINS takes when the instants say; null when they tie (the service breaks it by sequence). */
function timestampTake(sourceAt: string | null, targetAt: string | null) {
  if (!sourceAt || !targetAt) return null;
  const [s, t] = [Date.parse(sourceAt), Date.parse(targetAt)];
  return s === t ? null : s > t ? 'source' : 'target';
}

async function recordVerification(
  tx: pg.ClientBase,
  service: Service,
  { verification, checked, differences, sample }: Payload<'merge.verified'>,
): Promise<void> {
  await tx.query(`UPDATE merge_verifications SET ${service} = $2 WHERE id = $1`, [
    verification,
    { checked, differences, sample },
  ]);
}
