import {
  type AuditedRequest,
  auditMessage,
  canonicalJson,
  checkOutboxMessage,
  HttpProblem,
  inTransactionTogether,
  NotFound,
  type ObjectType,
  Outbox,
  type OutboxMessage,
  type Queryable,
  StaleWriteError,
  type Statement,
  Unprocessable,
} from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { Counter } from 'prom-client';
import { COMMIT_TIME, commitTime, type Origin, objectChange } from '../events.js';
import type { LiveLink } from '../links/repository.js';
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { retryWriteConflicts, WORLD_LOCK_SPACE, worldLockKey } from '../worlds/locks.js';
import { protectionColumns, refuseProtected, type WriteVia } from '../worlds/protection.js';
import {
  createdMeanwhile,
  type HeadWrite,
  insertHead,
  insertHeadsStatement,
  LOCK_HEADS,
  seqsOf,
  TAKE_SEQS,
  updateHead,
  updateHeadsStatement,
} from './heads.js';
import { type Checked, capped, type Properties } from './model.js';
import {
  CONTEXT_HEAD,
  type ContextRow,
  contextOf,
  type Head,
  inheritedSql,
  type ObjectContext,
  objectContext,
} from './repository.js';
import { tombstoneObject } from './tombstone.js';

/*
 * Object changes, decided and written, for every way in: REST (PUT, PATCH, DELETE), CDC and the
 * steps of actions. Every write is decided by planObjectWrite (preconditions, schema check,
 * identical-content check, version, event) and written one of two ways:
 * - writeObject, deleteObject: in the caller's transaction (which holds the world's drop lock
 *   shared), the change event added to its outbox;
 * - ObjectWrites: REST PUT and PATCH, in a transaction of their own of two round trips, alone
 *   under light load or grouped with the writes that queued meanwhile (group commit, ADR 15).
 */

export interface ObjectWrite {
  worldId: string;
  typeName: string;
  pk: string;
  origin: Origin;
  topicPrefix: string;
  /** Checks the locked head before anything is decided (preconditions); throws to refuse. */
  check?: (head: Head | null) => void;
  /** Who writes, for the world's protection (docs/adr/0058); a client's request when absent. */
  via?: WriteVia;
  /** The new properties from the locked head; errors in the result are a 422. */
  decide: (type: ObjectType, head: Head | null) => Checked;
  /** The request to record the write of, as `action` (docs/adr/0084): REST writes, not CDC's or actions'. */
  audit?: { request: AuditedRequest; action: string };
}

/** The audit record of a REST write, sent in the write's own outbox statement: none for other writers. */
function auditOfWrite(w: ObjectWrite, result: ObjectWritten): OutboxMessage[] {
  if (!w.audit) return [];
  return [
    auditMessage(w.audit.request, {
      action: w.audit.action,
      result: !result.changed ? 'unchanged' : result.status === 201 ? 'created' : 'updated',
      worldId: w.worldId,
      subject: `${w.typeName}/${w.pk}`,
      beforeVersion: result.before?.version ?? null,
      afterVersion: result.version,
    }),
  ];
}

export interface ObjectWritten {
  /** 201 when the object came to life, 200 when replaced or unchanged. */
  status: 200 | 201;
  /** false when the stored properties already were these: nothing written, no event. */
  changed: boolean;
  version: number;
  seq: number;
  properties: Properties;
  /** The head as it was before the write. */
  before: Head | null;
}

/** The world has a head of its own for the key (a fork's inherited version has none: it is inserted). */
const ownHead = (head: Head | null) => head !== null && !head.inherited;

const same = (a: Properties | null, b: Properties) => a !== null && canonicalJson(a) === canonicalJson(b);

/**
 * What a write decides once it holds the object's context (head locked): nothing to write (the
 * stored properties already are these), or the head to write and, given the write's seq, its
 * change event and its answer. Refusals (preconditions, schema) are thrown. Shared by writeObject
 * and ObjectWrites, so that both check and emit exactly the same.
 */
type WritePlan =
  | { kind: 'unchanged'; result: ObjectWritten }
  | {
      kind: 'write';
      change: HeadWrite;
      head: Head | null;
      /** The change event of the write of this seq, committed at writtenAt (COMMIT_TIME). */
      event: (seq: number, writtenAt: string) => OutboxMessage;
      result: (seq: number) => ObjectWritten;
    };

async function planObjectWrite(
  app: FastifyInstance,
  db: Queryable,
  w: ObjectWrite,
  ctx: ObjectContext,
): Promise<WritePlan> {
  const { worldId, typeName, pk, origin } = w;
  if (!ctx.provisioned) throw notProvisioned(worldId);
  refuseProtected(worldId, ctx.protection, w.via);
  const { type } = await objectTypeOf(app, db, worldId, typeName, ctx.schemaVersion);
  const head = ctx.head;
  w.check?.(head);
  const checked = w.decide(type, head);
  if (checked.errors.length > 0) {
    throw new Unprocessable(`the ${typeName} does not match the schema of ${worldId}`, capped(checked.errors));
  }
  const live = head !== null && !head.deleted;
  if (live && same(head.properties, checked.properties)) {
    const properties = head.properties as Properties;
    return {
      kind: 'unchanged',
      result: { status: 200, changed: false, version: head.version, seq: head.seq, properties, before: head },
    };
  }
  const change: HeadWrite = {
    worldId,
    type: typeName,
    pk,
    version: (head?.version ?? 0) + 1,
    properties: checked.properties,
    schemaVersion: ctx.schemaVersion,
    actor: origin.actor,
    requestId: origin.requestId,
  };
  return {
    kind: 'write',
    change,
    head,
    event: (seq, writtenAt) =>
      objectChange(
        {
          worldId,
          type: typeName,
          pk,
          kind: live ? 'updated' : 'created',
          version: change.version,
          seq,
          before: live ? head.properties : null,
          after: checked.properties,
          schemaVersion: ctx.schemaVersion,
          writtenAt,
        },
        origin,
      ),
    result: (seq) => ({
      status: live ? 200 : 201,
      changed: true,
      version: change.version,
      seq,
      properties: checked.properties,
      before: head,
    }),
  };
}

/**
 * Creates, replaces or revives an object in the caller's transaction (CDC, the steps of actions):
 * the head is locked, `decide` makes the properties.
 */
export async function writeObject(app: FastifyInstance, tx: pg.PoolClient, w: ObjectWrite): Promise<ObjectWritten> {
  const { worldId, typeName, pk } = w;
  for (let attempt = 0; ; attempt++) {
    const ctx = await objectContext(tx, worldId, typeName, pk, 'FOR NO KEY UPDATE');
    const plan = await planObjectWrite(app, tx, w, ctx);
    if (plan.kind === 'unchanged') return plan.result;
    const seq = ownHead(plan.head) ? await updateHead(tx, plan.change) : await insertHead(tx, plan.change);
    if (seq === null) {
      // Another transaction created the object between our read and insert: read it again, locked.
      if (attempt < 3) continue;
      throw new StaleWriteError(`${worldId}/${typeName}/${pk} keeps being created concurrently`);
    }
    await new Outbox(tx, w.topicPrefix).add(plan.event(seq, await commitTime(tx)));
    return plan.result(seq);
  }
}

export interface ObjectDelete {
  worldId: string;
  typeName: string;
  pk: string;
  origin: Origin;
  topicPrefix: string;
  /** Checks the locked live head (preconditions); throws to refuse. */
  check?: (head: Head) => void;
  /** Who deletes, for the world's protection; a client's request when absent. */
  via?: WriteVia;
}

/** Deletes a live object and its links (404 when there is none), as DELETE does. */
export async function deleteObject(
  app: FastifyInstance,
  tx: pg.PoolClient,
  d: ObjectDelete,
): Promise<{ version: number; seq: number; before: Head; removedLinks: LiveLink[] }> {
  const { worldId, typeName, pk } = d;
  const ctx = await objectContext(tx, worldId, typeName, pk, 'FOR UPDATE');
  if (!ctx.provisioned) throw notProvisioned(worldId);
  refuseProtected(worldId, ctx.protection, d.via);
  const { doc } = await objectTypeOf(app, tx, worldId, typeName, ctx.schemaVersion);
  const head = ctx.head;
  if (!head || head.deleted) throw new NotFound(`${typeName} ${pk} does not exist in ${worldId}`);
  d.check?.(head);
  const done = await tombstoneObject(tx, {
    worldId,
    type: typeName,
    pk,
    head,
    schemaVersion: ctx.schemaVersion,
    schema: doc,
    forked: ctx.forked ?? false,
    origin: d.origin,
    topicPrefix: d.topicPrefix,
  });
  return { ...done, before: head };
}

export interface ObjectWritesOptions {
  /** Write transactions running at once; the next group forms while they run. */
  inFlight: number;
  /** Writes in one transaction at most. */
  maxGroup: number;
}

interface Member {
  w: ObjectWrite;
  resolve: (written: ObjectWritten) => void;
  reject: (error: unknown) => void;
}

type Outcome = { ok: ObjectWritten } | { error: unknown };

/** What the writes did, for metrics and tests. */
export interface ObjectWriteStats {
  groups: number;
  grouped: number;
  alone: number;
  fellBack: number;
}

const keyOf = (w: ObjectWrite) => `${w.worldId}\u0000${w.typeName}\u0000${w.pk}`;

/**
 * The heads of several objects (any worlds, any types), locked in the database's order of
 * (world, type, pk) — the order in which bulk writes lock theirs (ORDER BY pk), so that neither
 * two groups nor a group and a bulk write wait on each other's rows in a cycle — with each
 * world's provisioning and schema version: contextSql for many keys. Rows come back in input
 * order (`n`).
 */
const CONTEXTS = `SELECT i.n, EXISTS (SELECT 1 FROM worlds WHERE id = i.world_id) AS provisioned,
        (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = i.world_id) AS schema_version,
        ${protectionColumns('pw')},
        ${CONTEXT_HEAD}
   FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(world_id, type, pk, n)
          ORDER BY world_id, type, pk) AS i
   LEFT JOIN worlds pw ON pw.id = i.world_id
   LEFT JOIN LATERAL (
     SELECT version, seq, deleted, properties, to_json(updated_at)#>>'{}' AS updated_at
       FROM object_heads WHERE world_id = i.world_id AND type = i.type AND pk = i.pk
        FOR NO KEY UPDATE
   ) h ON true
   ${inheritedSql('i.world_id', 'i.type', 'i.pk')}
  ORDER BY i.n`;

/**
 * Single-object writes that own their transaction (REST PUT and PATCH), docs/adr/0013 and 0015.
 *
 * A transaction of writes takes two round trips, whatever its size: BEGIN with the tables' lock
 * (ROW EXCLUSIVE, so inside the commit cut of ADR 8), the worlds' drop locks shared, the heads
 * locked and the seqs from data_seq; then the heads, the history and the outbox rows with COMMIT.
 *
 * While `inFlight` transactions are running, the writes that arrive queue; when one ends,
 * everything queued (up to `maxGroup`, one write per object) goes out as one transaction (group
 * commit). Each write is still decided alone (its preconditions, its schema check, its
 * identical-content check, its own version, seq, history row and event) and is answered only
 * after the commit that holds it; what one write refuses (412, 422, 404) refuses that write alone.
 * Under light load nothing queues and each write is a transaction of one, retried when its key
 * was created concurrently (the creation fails with unique_violation); a group that fails as a
 * whole (a key created concurrently, a deadlock, a lost connection) is not retried as a group:
 * each of its writes runs again alone.
 */
export class ObjectWrites {
  private readonly queue: Member[] = [];
  private running = 0;
  readonly stats: ObjectWriteStats = { groups: 0, grouped: 0, alone: 0, fellBack: 0 };

  constructor(
    private readonly app: FastifyInstance,
    private readonly options: ObjectWritesOptions,
  ) {
    const stats = this.stats;
    const counter = (name: string, help: string, value: () => number) =>
      new Counter({
        name,
        help,
        registers: [app.metrics],
        collect() {
          this.reset();
          this.inc(value());
        },
      });
    counter(
      'onto_data_write_groups_total',
      'Transactions that committed several single-object writes',
      () => stats.groups,
    );
    counter('onto_data_grouped_writes_total', 'Single-object writes committed in a group', () => stats.grouped);
    counter(
      'onto_data_writes_alone_total',
      'Single-object writes that ran in a transaction of their own',
      () => stats.alone,
    );
    counter(
      'onto_data_write_group_fallbacks_total',
      'Groups that failed as a whole and whose writes ran again alone',
      () => stats.fellBack,
    );
  }

  /** Writes waiting for a group. */
  get queued(): number {
    return this.queue.length;
  }

  /** Writes one object, alone or in the next group; resolves after the commit that holds it. */
  write(w: ObjectWrite): Promise<ObjectWritten> {
    return new Promise((resolve, reject) => {
      this.queue.push({ w, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.running < this.options.inFlight && this.queue.length > 0) {
      const group = this.take();
      this.running++;
      const done = group.length === 1 ? this.alone(group[0] as Member) : this.together(group);
      void done.finally(() => {
        this.running--;
        this.pump();
      });
    }
  }

  /** The queued writes for one group: oldest first, one per object (later ones wait their turn). */
  private take(): Member[] {
    const keys = new Set<string>();
    const group: Member[] = [];
    for (let i = 0; i < this.queue.length && group.length < this.options.maxGroup; ) {
      const m = this.queue[i] as Member;
      const key = keyOf(m.w);
      if (keys.has(key)) {
        i++;
        continue;
      }
      keys.add(key);
      group.push(m);
      this.queue.splice(i, 1);
    }
    return group;
  }

  private async alone(m: Member): Promise<void> {
    this.stats.alone++;
    await this.writeAlone(m.w).then(m.resolve, m.reject);
  }

  /** One write in a transaction of its own, tried again while its key is created concurrently. */
  private async writeAlone(w: ObjectWrite): Promise<ObjectWritten> {
    const once = async () => {
      const outcomes = new Map<ObjectWrite, Outcome>();
      await this.commit([w], outcomes).catch((error: unknown) => {
        if (createdMeanwhile(error))
          throw new StaleWriteError(`${w.worldId}/${w.typeName}/${w.pk} was created concurrently`);
        throw error;
      });
      const outcome = outcomes.get(w);
      if (!outcome) throw new Error('a write ended without an outcome');
      if ('error' in outcome) throw outcome.error;
      return outcome.ok;
    };
    return retryWriteConflicts(once);
  }

  private async together(members: Member[]): Promise<void> {
    const outcomes = new Map<ObjectWrite, Outcome>();
    try {
      await this.commit(
        members.map((m) => m.w),
        outcomes,
      );
      this.stats.groups++;
      this.stats.grouped += members.length;
    } catch (err) {
      // The group as a whole failed (nothing of it committed): what it refused stays refused,
      // every other write runs again alone, with the single write's own retries.
      this.stats.fellBack++;
      this.app.log.warn({ err, writes: members.length }, 'a group of writes failed as a whole; running them alone');
      await Promise.all(
        members.map(async ({ w }) => {
          const outcome = outcomes.get(w);
          if (outcome && 'error' in outcome) return;
          outcomes.set(
            w,
            await this.writeAlone(w).then(
              (ok) => ({ ok }),
              (error: unknown) => ({ error }),
            ),
          );
        }),
      );
    }
    for (const m of members) {
      const outcome = outcomes.get(m.w);
      if (!outcome) m.reject(new Error('a grouped write ended without an outcome'));
      else if ('ok' in outcome) m.resolve(outcome.ok);
      else m.reject(outcome.error);
    }
  }

  /** One transaction for these writes; fills `outcomes` (refusals are kept even when it throws). */
  private async commit(writes: ObjectWrite[], outcomes: Map<ObjectWrite, Outcome>): Promise<void> {
    const worldKeys = [...new Set(writes.map((w) => worldLockKey(w.worldId)))].sort((a, b) => a - b);
    await inTransactionTogether(
      this.app.pg,
      [
        { text: LOCK_HEADS },
        {
          text: 'SELECT pg_advisory_xact_lock_shared($1, k) FROM unnest($2::int[]) AS k',
          values: [WORLD_LOCK_SPACE, worldKeys],
        },
        {
          text: CONTEXTS,
          values: [writes.map((w) => w.worldId), writes.map((w) => w.typeName), writes.map((w) => w.pk)],
        },
        {
          text: TAKE_SEQS(`, ${COMMIT_TIME} AS at`),
          values: [writes.length],
        },
      ],
      async (tx, [, , contexts, seqs]) => {
        const plans: {
          w: ObjectWrite;
          plan: Extract<WritePlan, { kind: 'write' }>;
          seq: number;
          event: OutboxMessage;
        }[] = [];
        const free = seqsOf(seqs?.rows[0] as { seqs: string | null } | undefined, writes.length);
        // The audit records of the writes that succeed, unchanged ones included (docs/adr/0084).
        const audits: OutboxMessage[] = [];
        for (const [i, w] of writes.entries()) {
          try {
            const plan = await planObjectWrite(this.app, tx, w, contextOf(contexts?.rows[i] as ContextRow | undefined));
            if (plan.kind === 'unchanged') {
              outcomes.set(w, { ok: plan.result });
              audits.push(...auditOfWrite(w, plan.result));
              continue;
            }
            const seq = free[plans.length] as number;
            const event = plan.event(seq, seqs?.rows[0]?.at as string);
            // An event larger than the broker takes refuses this write alone (413), not the group.
            checkOutboxMessage(event, this.app.topicPrefix);
            plans.push({ w, plan, seq, event });
          } catch (error) {
            // A refusal of this write alone; anything else (the database) fails the transaction.
            if (!(error instanceof HttpProblem)) throw error;
            outcomes.set(w, { error });
          }
        }
        if (plans.length === 0) {
          const outbox = new Outbox(tx, this.app.topicPrefix);
          return { value: undefined, ...(audits.length > 0 ? { last: [outbox.addStatement(audits)] } : {}) };
        }
        const created = plans.filter((p) => !ownHead(p.plan.head));
        const updated = plans.filter((p) => ownHead(p.plan.head));
        for (const p of plans) {
          const result = p.plan.result(p.seq);
          outcomes.set(p.w, { ok: result });
          audits.push(...auditOfWrite(p.w, result));
        }
        const events: OutboxMessage[] = [...plans.map((p) => p.event), ...audits];
        const last: Statement[] = [];
        if (created.length > 0) {
          last.push(insertHeadsStatement(created.map((p) => ({ change: p.plan.change, seq: p.seq }))));
        }
        if (updated.length > 0) {
          last.push(updateHeadsStatement(updated.map((p) => ({ change: p.plan.change, seq: p.seq }))));
        }
        last.push(new Outbox(tx, this.app.topicPrefix).addStatement(events));
        return { value: undefined, last };
      },
    );
  }
}
