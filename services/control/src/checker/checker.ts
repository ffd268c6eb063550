import {
  type Admin,
  advisoryLockKey,
  type Broker,
  dlqOf,
  inTransaction,
  isEvent,
  lockSpace,
  newEvent,
  Outbox,
  type OutboxMessage,
  outboxOldestAgeSeconds,
  physicalTopic,
  type ReceivedEvent,
  type Statement,
  TOPICS,
  type TopicName,
  uuidv7,
  withTimeout,
} from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import type pg from 'pg';
import { Counter, Gauge, type Registry } from 'prom-client';
import { republishSchema } from '../admin/routes.js';

/** What the checker can find (docs/adr/0032). */
export type FindingKind =
  | 'schema_gap'
  | 'count_mismatch'
  | 'link_count_mismatch'
  | 'derived_stale'
  | 'outbox_stale'
  | 'dlq_depth'
  | 'unreported';

/** The repair event the checker asked for, or 'schema.republished' (control itself); null: none it can make. */
export type Repair =
  | 'schema.republished'
  | 'objects.recount.requested'
  | 'links.recount.requested'
  | 'derived.recompute.requested'
  | null;

export interface Finding {
  /** null for what belongs to no world: a service's outbox, a dead-letter topic. */
  world: string | null;
  kind: FindingKind;
  /** What is off: the service, object or link type, derived property or topic. */
  subject: string;
  detail: Record<string, unknown>;
  repair: Repair;
}

interface StorageReport {
  schemaVersion: number;
  seq: number;
  counts: Record<string, number>;
  /** Absent from a report of a data older than link counts: links are not compared then. */
  linkSeq?: number;
  links?: Record<string, number>;
  outboxOldestAgeSeconds: number;
}
interface IntelligenceReport {
  schemaVersion: number;
  dataSeq: number;
  counts: Record<string, number>;
  links?: Record<string, number>;
  staleDerived: string[];
  outboxOldestAgeSeconds: number;
}

export interface CheckerOptions {
  /** How long a check waits for data's and intelligence's reports. */
  reportTimeoutMs: number;
  /** Allowed count difference while writes flow, as a share of the larger count (at least 1 object). */
  countTolerance: number;
  /** An outbox row older than this is a finding. */
  outboxMaxAgeSeconds: number;
}

/** How long a run waits for the Kafka admin to connect before it reports the dead letters unread. */
const ADMIN_CONNECT_MS = 2000;

const REPORTS = {
  'storage.check.reported': 'data',
  'intelligence.check.reported': 'intelligence',
} as const;

/** The statement that records a batch's check reports, or null when it has none; a duplicate changes nothing. */
export function recordingCheckReports(events: ReceivedEvent[]): Statement | null {
  const rows = events.flatMap(({ event }) => {
    if (!isEvent(event, 'storage.check.reported', 'intelligence.check.reported')) return [];
    const service = REPORTS[event.type];
    const { checkId, ...report } = event.payload;
    return [{ checkId, world: event.world_id, service, report: JSON.stringify(report) }];
  });
  if (rows.length === 0) return null;
  return {
    text: `INSERT INTO checker_reports (check_id, world_id, service, report)
           SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[])
           ON CONFLICT DO NOTHING`,
    values: [
      rows.map((r) => r.checkId),
      rows.map((r) => r.world),
      rows.map((r) => r.service),
      rows.map((r) => r.report),
    ],
  };
}

/** A type's count, 0 when the side has none: a type named like a prototype member (`constructor`) included. */
const countOf = (counts: Record<string, number>, type: string): number =>
  (Object.hasOwn(counts, type) ? counts[type] : undefined) ?? 0;

/**
 * Counts per type (object or link) compared: exact when quiet, else within the tolerance of the
 * larger count (at least one). Re-announcing data's live ones brings back what intelligence lost;
 * it cannot remove extra ones, so a surplus in intelligence has no repair.
 */
function compareCounts(
  world: string,
  kind: 'count_mismatch' | 'link_count_mismatch',
  repair: 'objects.recount.requested' | 'links.recount.requested',
  c: { data: Record<string, number>; intelligence: Record<string, number>; quiet: boolean; countTolerance: number },
): Finding[] {
  const findings: Finding[] = [];
  for (const type of new Set([...Object.keys(c.data), ...Object.keys(c.intelligence)])) {
    const inData = countOf(c.data, type);
    const inIntelligence = countOf(c.intelligence, type);
    const allowed = c.quiet ? 0 : Math.max(1, Math.ceil(c.countTolerance * Math.max(inData, inIntelligence)));
    if (Math.abs(inData - inIntelligence) <= allowed) continue;
    findings.push({
      world,
      kind,
      subject: type,
      detail: { data: inData, intelligence: inIntelligence, quiet: c.quiet },
      repair: inIntelligence < inData ? repair : null,
    });
  }
  return findings;
}

/** The findings of one world from its two reports (pure: unit-testable). */
export function compareWorld(
  world: string,
  controlSchemaVersion: number,
  data: StorageReport | undefined,
  intelligence: IntelligenceReport | undefined,
  countTolerance: number,
): Finding[] {
  const findings: Finding[] = [];
  for (const [service, report] of [
    ['data', data],
    ['intelligence', intelligence],
  ] as const) {
    if (!report) {
      findings.push({ world, kind: 'unreported', subject: service, detail: {}, repair: null });
    } else if (report.schemaVersion < controlSchemaVersion) {
      findings.push({
        world,
        kind: 'schema_gap',
        subject: service,
        detail: { control: controlSchemaVersion, applied: report.schemaVersion },
        repair: 'schema.republished',
      });
    }
  }
  if (data && intelligence) {
    // Quiet: intelligence has applied everything data had written when it answered.
    findings.push(
      ...compareCounts(world, 'count_mismatch', 'objects.recount.requested', {
        data: data.counts,
        intelligence: intelligence.counts,
        quiet: intelligence.dataSeq >= data.seq,
        countTolerance,
      }),
    );
    if (data.links && intelligence.links) {
      findings.push(
        ...compareCounts(world, 'link_count_mismatch', 'links.recount.requested', {
          data: data.links,
          intelligence: intelligence.links,
          quiet: intelligence.dataSeq >= (data.linkSeq ?? 0),
          countTolerance,
        }),
      );
    }
    for (const name of intelligence.staleDerived) {
      findings.push({ world, kind: 'derived_stale', subject: name, detail: {}, repair: 'derived.recompute.requested' });
    }
  }
  return findings;
}

/**
 * The periodic consistency checker (docs/adr/0032). One run: asks data and intelligence for a
 * report of every ready world (check.requested on onto.worlds), waits for their answers on
 * onto.storage and onto.intelligence, compares them with control's schema and with each other,
 * looks at the outboxes and dead-letter topics, records what it found and repairs through events.
 * One run at a time across replicas: a session advisory lock, skipped when another holds it.
 */
export class ConsistencyChecker {
  private admin: Promise<Admin> | undefined;
  private readonly findingsGauge: Gauge<'world' | 'kind'>;
  private readonly repairs: Counter<'kind'>;

  constructor(
    private readonly pool: pg.Pool,
    private readonly broker: Broker,
    private readonly topicPrefix: string,
    private readonly log: FastifyBaseLogger,
    registry: Registry,
    private readonly opts: CheckerOptions,
  ) {
    this.findingsGauge = new Gauge({
      name: 'onto_checker_findings',
      help: "The consistency checker's findings of its last run, by world ('' for none) and kind",
      labelNames: ['world', 'kind'] as const,
      registers: [registry],
    });
    this.repairs = new Counter({
      name: 'onto_checker_repairs_total',
      help: 'Repairs the consistency checker asked for, by the kind of finding',
      labelNames: ['kind'] as const,
      registers: [registry],
    });
  }

  /**
   * One check; answers its findings, or null when another replica's check holds the lock or, with
   * `unlessRanWithinMs` (the timer's), a check of any replica started that recently.
   */
  async runCheck(opts: { unlessRanWithinMs?: number } = {}): Promise<Finding[] | null> {
    const session = await this.pool.connect();
    try {
      const key = [lockSpace('chck'), advisoryLockKey(this.topicPrefix)];
      const { rows } = await session.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS locked', key);
      if (!rows[0]?.locked) return null;
      try {
        if (opts.unlessRanWithinMs !== undefined) {
          // Replicas' timers are not in step: the period is the deployment's, not each replica's.
          const recent = await session.query(
            `SELECT 1 FROM checker_runs WHERE started_at > now() - $1 * interval '1 millisecond' LIMIT 1`,
            [opts.unlessRanWithinMs],
          );
          if (recent.rowCount) return null;
        }
        return await this.check();
      } finally {
        await session.query('SELECT pg_advisory_unlock($1, $2)', key);
      }
    } finally {
      session.release();
    }
  }

  /**
   * Sets `onto_checker_findings` from the last finished run of any replica: a replica whose timer
   * was skipped would otherwise export its own older run's findings for ever, and the alert on
   * them (max over replicas) would not clear.
   */
  async refreshFindingsGauge() {
    const { rows } = await this.pool.query<{ world: string | null; kind: string; n: number }>(
      `SELECT f.world_id AS world, f.kind, count(*)::int AS n FROM checker_findings f
        WHERE f.check_id = (SELECT check_id FROM checker_runs WHERE finished_at IS NOT NULL
                             ORDER BY finished_at DESC LIMIT 1)
        GROUP BY f.world_id, f.kind`,
    );
    this.findingsGauge.reset();
    for (const r of rows) this.findingsGauge.set({ world: r.world ?? '', kind: r.kind }, r.n);
  }

  async close() {
    // The admin connects with a bound (dlqDepths), so this wait is bounded too: a broker that
    // accepts connections and never answers cannot hold the shutdown.
    const admin = await this.admin?.catch(() => undefined);
    this.admin = undefined;
    await admin?.disconnect();
  }

  private async check(): Promise<Finding[]> {
    const checkId = uuidv7();
    const worlds = await inTransaction(this.pool, async (tx) => {
      await tx.query('INSERT INTO checker_runs (check_id) VALUES ($1)', [checkId]);
      // Reports of runs older than a day are of no use any more.
      await tx.query(`DELETE FROM checker_reports WHERE received_at < now() - interval '1 day'`);
      const { rows } = await tx.query<{ world: string; schemaVersion: number }>(
        `SELECT w.id AS world,
                (SELECT coalesce(max(version), 0) FROM schema_versions v WHERE v.world_id = w.id) AS "schemaVersion"
           FROM worlds w WHERE w.status = 'READY' ORDER BY w.id`,
      );
      if (rows.length > 0) {
        await new Outbox(tx, this.topicPrefix).add(
          rows.map(({ world }) => ({
            event: newEvent({
              type: 'check.requested',
              worldId: world,
              key: world,
              version: 0,
              producer: 'control',
              producerSeq: 0,
              payload: { checkId },
            }),
            key: TOPICS['onto.worlds'].key({ worldId: world }),
          })),
        );
      }
      return rows;
    });
    const reports = await this.awaitReports(checkId, worlds.length * 2);
    const findings: Finding[] = [];
    const outboxAges = new Map<string, number>([['control', await outboxOldestAgeSeconds(this.pool)]]);
    for (const { world, schemaVersion } of worlds) {
      const data = reports.get(`${world}\u0000data`) as StorageReport | undefined;
      const intelligence = reports.get(`${world}\u0000intelligence`) as IntelligenceReport | undefined;
      findings.push(...compareWorld(world, schemaVersion, data, intelligence, this.opts.countTolerance));
      for (const [service, report] of [
        ['data', data],
        ['intelligence', intelligence],
      ] as const) {
        if (report) outboxAges.set(service, Math.max(outboxAges.get(service) ?? 0, report.outboxOldestAgeSeconds));
      }
    }
    for (const [service, age] of outboxAges) {
      if (age > this.opts.outboxMaxAgeSeconds) {
        findings.push({
          world: null,
          kind: 'outbox_stale',
          subject: service,
          detail: { oldestAgeSeconds: age, boundSeconds: this.opts.outboxMaxAgeSeconds },
          repair: null,
        });
      }
    }
    for (const [topic, depth] of await this.dlqDepths()) {
      if (depth > 0) findings.push({ world: null, kind: 'dlq_depth', subject: topic, detail: { depth }, repair: null });
    }
    await this.recordAndRepair(checkId, findings);
    return findings;
  }

  /** Waits until every expected report arrived or the timeout passed; answers those that came. */
  private async awaitReports(checkId: string, expected: number): Promise<Map<string, unknown>> {
    const deadline = Date.now() + this.opts.reportTimeoutMs;
    for (;;) {
      const { rows } = await this.pool.query<{ world: string; service: string; report: unknown }>(
        'SELECT world_id AS world, service, report FROM checker_reports WHERE check_id = $1',
        [checkId],
      );
      if (rows.length >= expected || Date.now() >= deadline) {
        return new Map(rows.map((r) => [`${r.world}\u0000${r.service}`, r.report]));
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  /** Records per dead-letter topic of this deployment (end offsets minus earliest). */
  private async dlqDepths(): Promise<Map<string, number>> {
    const depths = new Map<string, number>();
    try {
      // Bounded, as every Kafka read of a periodic job: a silent broker ends this run with a
      // warning instead of holding it (and the shutdown, which waits for the run) for good.
      this.admin ??= withTimeout(this.broker.admin(), ADMIN_CONNECT_MS, 'kafka admin');
      const admin = await this.admin;
      const existing = new Set(await admin.listTopics());
      for (const topic of Object.keys(TOPICS) as TopicName[]) {
        const dlq = physicalTopic(this.topicPrefix, dlqOf(topic));
        if (!existing.has(dlq)) continue;
        const offsets = await admin.partitionOffsets(dlq);
        depths.set(
          dlq,
          offsets.reduce((sum, p) => sum + Number(BigInt(p.high) - BigInt(p.low)), 0),
        );
      }
    } catch (err) {
      this.admin = undefined; // reconnect at the next run
      this.log.warn({ err }, 'the checker could not read the dead-letter topics');
    }
    return depths;
  }

  private async recordAndRepair(checkId: string, findings: Finding[]) {
    await inTransaction(this.pool, async (tx) => {
      const repairs: OutboxMessage[] = [];
      const republished = new Set<string>();
      for (const f of findings) {
        if (f.repair === 'schema.republished' && f.world) {
          // Once per world, however many services lack the version.
          if (!republished.has(f.world)) await republishSchema(tx, f.world, this.topicPrefix, `checker:${checkId}`);
          republished.add(f.world);
        } else if ((f.repair === 'objects.recount.requested' || f.repair === 'links.recount.requested') && f.world) {
          repairs.push({
            event: newEvent({
              type: f.repair,
              worldId: f.world,
              key: f.world,
              version: 0,
              producer: 'control',
              producerSeq: 0,
              payload: { checkId, type: f.subject },
            }),
            key: TOPICS['onto.worlds'].key({ worldId: f.world }),
          });
        } else if (f.repair === 'derived.recompute.requested' && f.world) {
          repairs.push({
            event: newEvent({
              type: 'derived.recompute.requested',
              worldId: f.world,
              key: f.world,
              version: 0,
              producer: 'control',
              producerSeq: 0,
              payload: { checkId, name: f.subject },
            }),
            key: TOPICS['onto.worlds'].key({ worldId: f.world }),
          });
        }
      }
      if (repairs.length > 0) await new Outbox(tx, this.topicPrefix).add(repairs);
      if (findings.length > 0) {
        await tx.query(
          `INSERT INTO checker_findings (check_id, world_id, kind, subject, detail, repair)
           SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[])`,
          [
            checkId,
            findings.map((f) => f.world),
            findings.map((f) => f.kind),
            findings.map((f) => f.subject),
            findings.map((f) => JSON.stringify(f.detail)),
            findings.map((f) => f.repair),
          ],
        );
      }
      await tx.query('UPDATE checker_runs SET finished_at = now() WHERE check_id = $1', [checkId]);
    });
    this.findingsGauge.reset();
    for (const f of findings) {
      this.findingsGauge.inc({ world: f.world ?? '', kind: f.kind });
      if (f.repair) this.repairs.inc({ kind: f.kind });
    }
  }
}
