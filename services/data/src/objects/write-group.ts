import { HttpProblem, inTransactionTogether, Outbox, type OutboxMessage, type Statement } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import { Counter } from 'prom-client';
import { WORLD_LOCK_SPACE, worldLockKey } from '../http.js';
import { type ContextRow, contextOf, type HeadWrite, keepSuperseded } from './repository.js';
import { type ObjectWrite, type ObjectWritten, planObjectWrite, type WritePlan } from './write.js';
import { writeObjectFast } from './write-fast.js';

/*
 * Group commit of single-object writes (REST PUT and PATCH), docs/adr/0015.
 *
 * While `inFlight` transactions of writes are running, the writes that arrive queue; when one
 * ends, everything queued (up to `maxGroup`, one write per object) goes out as one transaction of
 * two round trips, whatever its size. Each write is still decided alone (its preconditions, its
 * schema check, its identical-content check, its own version, seq, history row and event) and is
 * answered only after the commit that holds it; what one write refuses (412, 422, 404) refuses
 * that write alone. A group that fails as a whole (a key created concurrently, a deadlock, a
 * lost connection) is not retried as a group: each of its writes runs again alone.
 *
 * Under light load nothing queues and each write is its own transaction, as before; under load
 * PostgreSQL runs a handful of statements per group instead of eight per write.
 */

export interface WriteGroupOptions {
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

/** What a group did, for metrics and tests. */
export interface GroupStats {
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
        h.version, h.seq, h.deleted, h.properties, h.updated_at
   FROM (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(world_id, type, pk, n)
          ORDER BY world_id, type, pk) AS i
   LEFT JOIN LATERAL (
     SELECT version, seq, deleted, properties, to_json(updated_at)#>>'{}' AS updated_at
       FROM object_heads WHERE world_id = i.world_id AND type = i.type AND pk = i.pk
        FOR NO KEY UPDATE
   ) h ON true
  ORDER BY i.n`;

const ROWS = `unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::int[], $7::text[], $8::text[], $9::bigint[])
    AS i(world_id, type, pk, version, properties, schema_version, actor, request_id, seq)`;

/** New heads (a key created meanwhile fails the statement: unique_violation); no history yet (docs/adr/0017). */
const INSERT_HEADS = `INSERT INTO object_heads
     (world_id, type, pk, version, seq, deleted, properties, schema_version, actor, request_id)
   SELECT world_id, type, pk, version, seq, false, properties::jsonb, schema_version, actor, request_id FROM ${ROWS}`;

/** Next versions of heads this transaction holds locked; the versions they supersede go to history. */
const UPDATE_HEADS = `WITH i AS (SELECT * FROM ${ROWS}),
   ${keepSuperseded('i JOIN object_heads o ON o.world_id = i.world_id AND o.type = i.type AND o.pk = i.pk')}
   UPDATE object_heads AS o
      SET version = i.version, seq = i.seq, deleted = false, properties = i.properties::jsonb,
          schema_version = i.schema_version, actor = i.actor, request_id = i.request_id, updated_at = now(),
          created_at = CASE WHEN o.deleted THEN now() ELSE o.created_at END
     FROM i WHERE o.world_id = i.world_id AND o.type = i.type AND o.pk = i.pk`;

function headRows(writes: { change: HeadWrite; seq: number }[]): Statement['values'] {
  return [
    writes.map((x) => x.change.worldId),
    writes.map((x) => x.change.type),
    writes.map((x) => x.change.pk),
    writes.map((x) => x.change.version),
    writes.map((x) => JSON.stringify(x.change.properties)),
    writes.map((x) => x.change.schemaVersion),
    writes.map((x) => x.change.actor),
    writes.map((x) => x.change.requestId),
    writes.map((x) => x.seq),
  ];
}

export class WriteGroups {
  private readonly queue: Member[] = [];
  private running = 0;
  readonly stats: GroupStats = { groups: 0, grouped: 0, alone: 0, fellBack: 0 };

  constructor(
    private readonly app: FastifyInstance,
    private readonly options: WriteGroupOptions,
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
    await writeObjectFast(this.app, m.w).then(m.resolve, m.reject);
  }

  private async together(members: Member[]): Promise<void> {
    const outcomes = new Map<Member, { ok: ObjectWritten } | { error: unknown }>();
    try {
      await this.commitGroup(members, outcomes);
      this.stats.groups++;
      this.stats.grouped += members.length;
    } catch (err) {
      // The group as a whole failed (nothing of it committed): what it refused stays refused,
      // every other write runs again alone, with the single write's own retries.
      this.stats.fellBack++;
      this.app.log.warn({ err, writes: members.length }, 'a group of writes failed as a whole; running them alone');
      await Promise.all(
        members.map(async (m) => {
          const outcome = outcomes.get(m);
          if (outcome && 'error' in outcome) return;
          outcomes.set(
            m,
            await writeObjectFast(this.app, m.w).then(
              (ok) => ({ ok }),
              (error: unknown) => ({ error }),
            ),
          );
        }),
      );
    }
    for (const m of members) {
      const outcome = outcomes.get(m);
      if (!outcome) m.reject(new Error('a grouped write ended without an outcome'));
      else if ('ok' in outcome) m.resolve(outcome.ok);
      else m.reject(outcome.error);
    }
  }

  /** One transaction for the group; fills `outcomes` (refusals are kept even when it throws). */
  private async commitGroup(
    members: Member[],
    outcomes: Map<Member, { ok: ObjectWritten } | { error: unknown }>,
  ): Promise<void> {
    const worldKeys = [...new Set(members.map((m) => worldLockKey(m.w.worldId)))].sort((a, b) => a - b);
    await inTransactionTogether(
      this.app.pg,
      [
        { text: 'LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE' },
        {
          text: 'SELECT pg_advisory_xact_lock_shared($1, k) FROM unnest($2::int[]) AS k',
          values: [WORLD_LOCK_SPACE, worldKeys],
        },
        {
          text: CONTEXTS,
          values: [members.map((m) => m.w.worldId), members.map((m) => m.w.typeName), members.map((m) => m.w.pk)],
        },
        { text: "SELECT nextval('data_seq')::text AS seq FROM generate_series(1, $1)", values: [members.length] },
      ],
      async (tx, [, , contexts, seqs]) => {
        const plans: { m: Member; plan: Extract<WritePlan, { kind: 'write' }>; seq: number }[] = [];
        const free = (seqs?.rows ?? []).map((r) => Number(r.seq));
        for (const [i, m] of members.entries()) {
          try {
            const plan = await planObjectWrite(
              this.app,
              tx,
              m.w,
              contextOf(contexts?.rows[i] as ContextRow | undefined),
            );
            if (plan.kind === 'unchanged') outcomes.set(m, { ok: plan.result });
            else plans.push({ m, plan, seq: free[plans.length] as number });
          } catch (error) {
            // A refusal of this write alone; anything else (the database) fails the group.
            if (!(error instanceof HttpProblem)) throw error;
            outcomes.set(m, { error });
          }
        }
        if (plans.length === 0) return { value: undefined };
        const created = plans.filter((p) => p.plan.head === null);
        const updated = plans.filter((p) => p.plan.head !== null);
        const events: OutboxMessage[] = plans.map((p) => p.plan.event(p.seq));
        for (const p of plans) outcomes.set(p.m, { ok: p.plan.result(p.seq) });
        const last: Statement[] = [];
        if (created.length > 0) {
          last.push({
            text: INSERT_HEADS,
            values: headRows(created.map((p) => ({ change: p.plan.change, seq: p.seq }))),
          });
        }
        if (updated.length > 0) {
          last.push({
            text: UPDATE_HEADS,
            values: headRows(updated.map((p) => ({ change: p.plan.change, seq: p.seq }))),
          });
        }
        last.push(new Outbox(tx, this.app.topicPrefix).addStatement(events));
        return { value: undefined, last };
      },
    );
  }
}
