import { ROOT_CONTEXT, type Span, SpanKind, type Tracer, trace } from '@opentelemetry/api';
import type pg from 'pg';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { backoffDelay } from '../backoff.js';
import { type Listening, listenWithReconnect } from '../db/listen.js';
import { queryTogether, type Statement } from '../db/pipeline.js';
import { inTransaction } from '../db/transaction.js';
import { cloudEventHeaders } from '../events/cloudevents.js';
import { uuidv7 } from '../ids/uuidv7.js';
import { type Producer, RecordsRefusedError } from '../kafka/broker.js';
import { withTimeout } from '../readiness.js';
import { contextOfTraceparent, endSpan, traceparentOf, tracingEnabled } from '../tracing/context.js';
import { decodeBundle } from './bundle.js';
import { laneOf, OUTBOX_LANES, type Queryable } from './outbox.js';
import { recordLimits } from './record-limits.js';
import { OUTBOX_CHANNEL, OUTBOX_SIGNAL_SENDER, onLocalOutboxWrite, wakeRelaysAfterCommit } from './signal.js';

export interface PendingRow {
  id: number;
  event_id: string;
  topic: string;
  partition_key: string;
  body: string;
  headers: Record<string, string>;
  /** Events in the row when it is a bundle (migrations/008), else null: the row is one event. */
  bundle: number | null;
}

/** A batch size is an integer from 1 to 1000: bounded so that recovery never loads everything. */
export function checkBatchSize(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 1000) {
    throw new RangeError(`batch size must be an integer from 1 to 1000, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** The oldest pending rows, in id order, at most `limit`. */
export async function pendingRows(db: Queryable, limit: number): Promise<PendingRow[]> {
  const { rows } = await db.query<PendingRow & Record<string, unknown>>(
    `SELECT o.id, o.event_id::text, o.topic, o.partition_key, o.body, o.headers, o.bundle
       FROM outbox_pending p JOIN outbox o ON o.id = p.id
      ORDER BY p.id LIMIT $1`,
    [checkBatchSize(limit)],
  );
  return rows;
}

/**
 * Marks rows sent: takes them out of the pending set (`USING` and `WHERE` say which) and records
 * the ones it took in one outbox_sent row, with the time. Answers how many it took.
 */
function markSent(using: string, where: string): string {
  return `WITH done AS (
       DELETE FROM outbox_pending p USING ${using} WHERE ${where} RETURNING p.id
     ), sent AS (
       INSERT INTO outbox_sent (ids) SELECT array_agg(id) FROM done HAVING count(*) > 0 RETURNING ids
     )
     SELECT coalesce(sum(cardinality(ids)), 0)::int AS n FROM sent`;
}

/** Marks rows sent; rows already sent are left as they are, so acknowledging twice is a no-op. */
export async function acknowledge(db: Queryable, ids: number[]): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    markSent('outbox o', 'o.id = ANY($1::bigint[]) AND p.lane = o.lane AND p.id = o.id'),
    [ids],
  );
  return rows[0]?.n ?? 0;
}

// Namespace of the lane advisory locks (the bytes of "onto").
const LANE_LOCK_SPACE = 0x6f6e746f;

/**
 * Claims pending rows of lanes no other relay holds, the lane with the oldest pending row first,
 * each lane's rows in id order, up to `batchSize` in all. A lane's lock is taken for the
 * transaction, which spans publish and acknowledgement: while one relay publishes a lane, no
 * other can, so per-key order holds with any number of relays. The rows are read by a second
 * statement, whose snapshot is taken after the locks: it sees what the lane's previous holder
 * committed, so nothing already sent is claimed again and no row lock is needed. The first
 * statement leaves the lanes it locked, oldest first, in a transaction-local setting that the
 * second reads, so both travel with BEGIN: one round trip per claim. (Reading them back from
 * pg_locks and probing each lane's oldest row again was a sixth of the relay's PostgreSQL time.)
 */
async function claim(client: pg.PoolClient, batchSize: number, maxLanes: number): Promise<ClaimedRow[]> {
  // The mark commits synchronously. An asynchronous commit would lose nothing (a lost mark only
  // publishes the rows again), but until the WAL writer flushed it, no reader may set the deleted
  // rows' hint bits, so they are not known dead and every lane probe walked them again, heap
  // fetch by heap fetch: 9,000-25,000 heap fetches per 64-lane probe late in ./onto bench relay,
  // 6-8 ms of a 15 ms claim; with the flush, 64-1,064 and 2.5 ms.
  const results = await queryTogether(client, [
    { text: 'BEGIN' },
    // A lane's first rows are read in index order. Estimating a lane from statistics older than
    // its backlog, the planner would rather fetch the whole lane (bitmap scan) and sort it: 2-3 ms
    // more per claim of 1,000 rows in ./onto bench relay.
    { text: 'SET LOCAL enable_bitmapscan = off' },
    {
      text: `WITH oldest AS MATERIALIZED (
         SELECT l.lane, first.id
           FROM generate_series(0, $3::int - 1) AS l(lane)
           CROSS JOIN LATERAL (SELECT id FROM outbox_pending WHERE lane = l.lane ORDER BY id LIMIT 1) first
          ORDER BY first.id
       )
       , locked AS (SELECT lane, id FROM oldest WHERE pg_try_advisory_xact_lock($1, lane) LIMIT $2)
       SELECT set_config('onto.relay_lanes', coalesce(string_agg(lane::text, ',' ORDER BY id), ''), true) AS lanes
         FROM locked`,
      values: [LANE_LOCK_SPACE, maxLanes, OUTBOX_LANES],
    },
    {
      // The lanes this transaction locked, oldest pending row first. Each lane is read from its
      // head, not from the first row the statement above saw: a row below that one may have
      // committed in between, and be the earlier event of a key whose later event is now visible.
      // A bundle's body is left for below: it is large, and the bundle may not be taken.
      text: `SELECT o.id, o.lane, o.event_id::text, o.topic, o.partition_key,
                    CASE WHEN o.bundle IS NULL THEN o.body END AS body, o.headers, o.bundle
         FROM unnest(string_to_array(nullif(current_setting('onto.relay_lanes', true), ''), ',')::int[])
              WITH ORDINALITY AS mine(lane, n)
         CROSS JOIN LATERAL (SELECT id FROM outbox_pending p WHERE p.lane = mine.lane ORDER BY id LIMIT $1) p
         JOIN outbox o ON o.id = p.id
        ORDER BY mine.n, o.id
        LIMIT $1`,
      values: [batchSize],
    },
  ]);
  const rows = (results[3]?.rows ?? []) as unknown as ClaimedRow[];
  // A bundle counts as its events: rows are taken while fewer than batchSize events come before
  // them, so a claim holds at most batchSize + BUNDLE_MAX - 1 events, and always its first row.
  // The rest of the claimed lanes' rows stay pending, after the ones taken: each lane's order holds.
  let events = 0;
  let taken = 0;
  let bundles = false;
  for (const row of rows) {
    if (events >= batchSize) break;
    events += row.bundle ?? 1;
    bundles ||= row.bundle !== null;
    taken++;
  }
  const claimed = rows.slice(0, taken);
  if (bundles) {
    const { rows: bodies } = await client.query<{ id: string; body: string }>(
      'SELECT id, body FROM outbox WHERE id = ANY($1::bigint[])',
      [claimed.filter((r) => r.bundle !== null).map((r) => r.id)],
    );
    const byId = new Map(bodies.map((b) => [String(b.id), b.body]));
    for (const row of claimed) if (row.bundle !== null) row.body = byId.get(String(row.id)) ?? '';
  }
  return claimed;
}

interface ClaimedRow extends PendingRow {
  lane: number;
}

/** An event the broker refused for good, with its reason. */
interface SetAside {
  record: OutboxRecord;
  reason: string;
}

/**
 * Marks claimed rows sent (out of the pending set, one outbox_sent row), keeps the events the
 * broker refused in outbox_set_aside, and commits, in one round trip.
 */
async function markSentAndCommit(client: pg.PoolClient, rows: ClaimedRow[], setAside: SetAside[]): Promise<void> {
  const statements: Statement[] = [
    {
      text: markSent('unnest($1::smallint[], $2::bigint[]) AS s(lane, id)', 'p.lane = s.lane AND p.id = s.id'),
      values: [rows.map((r) => r.lane), rows.map((r) => r.id)],
    },
  ];
  if (setAside.length > 0) {
    const records = setAside.map((s) => s.record);
    statements.push({
      text: `INSERT INTO outbox_set_aside (outbox_id, event_id, topic, partition_key, body, headers, reason)
             SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[])`,
      values: [
        records.map((r) => r.rowId),
        records.map((r) => r.eventId),
        records.map((r) => r.topic),
        records.map((r) => r.key),
        records.map((r) => r.value),
        records.map((r) => JSON.stringify(r.rowHeaders)),
        setAside.map((s) => s.reason),
      ],
    });
  }
  await queryTogether(client, [...statements, { text: 'COMMIT' }]);
}

/**
 * Puts set-aside events back in the outbox (all waiting ones, or those of `ids`), once their cause
 * is fixed (a topic's limit raised, an ACL granted); answers how many. Each goes back as a bundle
 * of one that holds the event's own id and body, in its key's lane, behind what that lane holds
 * now: its consumers take it as a late copy (upserts keep the newest version). A malformed bundle
 * is not put back: its body is no event, only what is left to diagnose the bug that wrote it.
 */
export async function redriveSetAside(
  pool: pg.Pool,
  ids?: number[],
  /** Runs in the redrive's transaction with how many it put back: the request's audit record. */
  also?: (tx: pg.PoolClient, redriven: number) => Promise<void>,
): Promise<number> {
  return inTransaction(pool, async (tx) => {
    const { rows } = await tx.query<{
      id: string;
      event_id: string;
      topic: string;
      partition_key: string;
      body: string;
      headers: Record<string, string>;
    }>(
      `SELECT id, event_id::text, topic, partition_key, body, headers FROM outbox_set_aside
        WHERE redriven_at IS NULL AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
          AND reason NOT LIKE $2
        ORDER BY id FOR UPDATE`,
      [ids ?? null, `${MALFORMED_BUNDLE}%`],
    );
    await also?.(tx, rows.length);
    if (rows.length === 0) return 0;
    await tx.query(
      `WITH added AS (
         INSERT INTO outbox (event_id, topic, partition_key, lane, body, headers, bundle)
         SELECT e, t, k, l, b, h, 1
           FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::jsonb[])
                WITH ORDINALITY AS u(e, t, k, l, b, h, n)
          ORDER BY n
         RETURNING id, lane
       ), queued AS (
         INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM added
       )
       UPDATE outbox_set_aside SET redriven_at = now() WHERE id = ANY($7::bigint[])`,
      [
        rows.map(() => uuidv7()),
        rows.map((r) => r.topic),
        rows.map((r) => r.partition_key),
        rows.map((r) => laneOf(r.partition_key)),
        // A template of one part and no values: the event's body whole, then its id and key.
        rows.map((r) => `${JSON.stringify([r.body])}\n${r.event_id}\t${r.partition_key}`),
        rows.map((r) => JSON.stringify(r.headers)),
        rows.map((r) => r.id),
      ],
    );
    wakeRelaysAfterCommit(tx);
    return rows.length;
  });
}

export interface RelayFaults {
  /** Runs after the broker acknowledged a batch and before it is marked sent. */
  afterPublish?: (rows: PendingRow[]) => void | Promise<void>;
}

export interface OutboxRelayOptions {
  pool: pg.Pool;
  /** One producer, or one per claim loop so that their publishes overlap. */
  producer: Producer | Producer[];
  logger: Logger;
  batchSize?: number;
  /** Claim loops run at once in this process; each holds its own lanes. */
  concurrency?: number;
  /**
   * Most lanes one claim takes, so that concurrent loops and relays share the work; by default
   * the lanes divided by the loops. (Half the lanes each left a third loop none while the other
   * two published: with three loops the relay drained at half the rate of two.)
   */
  maxLanesPerClaim?: number;
  pollIntervalMs?: number;
  retentionMs?: number;
  pruneIntervalMs?: number;
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  registry?: Registry;
  faults?: RelayFaults;
  /** A span per row sent that carries a trace, the parent of its consumers' (docs/adr/0055). */
  tracer?: Tracer;
}

/**
 * Publishes the outbox to Kafka: woken by NOTIFY, polling as a fallback because notifications
 * are lost while the listener reconnects; marks rows sent only after the broker acknowledged
 * them; retries a failed publish with exponential backoff; prunes sent rows after retention.
 */
export class OutboxRelay {
  readonly batchSize: number;
  private readonly opts: Required<Omit<OutboxRelayOptions, 'registry' | 'faults' | 'tracer'>> & OutboxRelayOptions;
  private running = false;
  private stopping = false;
  /** Rejects once stop() is called, so that a publish to a silent broker does not hold a batch. */
  private stopped: Promise<never> = new Promise(() => {});
  private signalStop: (error: Error) => void = () => {};
  private loops: Promise<void>[] = [];
  private listening: Listening | undefined;
  private wakers = new Set<() => void>();
  /** Loops backing off after a failed publish: new rows do not cut their wait short, stop() does. */
  private backingOff = new Set<() => void>();
  /** Counts the signals that rows were committed: a loop whose batch overlapped one claims again. */
  private signals = 0;
  private unsubscribe: () => void = () => {};
  private readonly published: Counter;
  private readonly failures: Counter;
  private readonly setAside: Counter;

  constructor(options: OutboxRelayOptions) {
    this.batchSize = checkBatchSize(options.batchSize ?? 500);
    this.opts = {
      concurrency: 2,
      maxLanesPerClaim: Math.ceil(OUTBOX_LANES / (options.concurrency ?? 2)),
      pollIntervalMs: 1000,
      retentionMs: 24 * 3600_000,
      pruneIntervalMs: 60_000,
      backoffInitialMs: 100,
      backoffMaxMs: 10_000,
      batchSize: this.batchSize,
      ...options,
    };
    const registers = options.registry ? [options.registry] : [];
    const pool = options.pool;
    this.published = new Counter({
      name: 'onto_outbox_published_total',
      help: 'Outbox events published and acknowledged by the broker',
      registers,
    });
    this.failures = new Counter({
      name: 'onto_outbox_publish_failures_total',
      help: 'Batches whose publish failed and stayed pending',
      registers,
    });
    this.setAside = new Counter({
      name: 'onto_outbox_set_aside_total',
      help: 'Outbox events the broker refused for good (too large, invalid, not authorised), set aside in outbox_set_aside',
      registers,
    });
    new Gauge({
      name: 'onto_outbox_set_aside_waiting',
      help: 'Set-aside outbox events not yet redriven',
      registers,
      async collect() {
        const { rows } = await pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM outbox_set_aside WHERE redriven_at IS NULL',
        );
        this.set(rows[0]?.n ?? 0);
      },
    });
    new Gauge({
      name: 'onto_outbox_backlog',
      help: 'Outbox events not yet sent (a bundle counts as its events)',
      registers,
      async collect() {
        const { rows } = await pool.query<{ n: number }>(
          'SELECT coalesce(sum(coalesce(o.bundle, 1)), 0)::int AS n FROM outbox_pending p JOIN outbox o ON o.id = p.id',
        );
        this.set(rows[0]?.n ?? 0);
      },
    });
    new Gauge({
      name: 'onto_outbox_oldest_pending_age_seconds',
      help: 'Age of the oldest outbox row not yet sent (0 when none)',
      registers,
      async collect() {
        const { rows } = await pool.query<{ age: number | null }>(
          `SELECT extract(epoch FROM now() - created_at)::float8 AS age FROM outbox
            WHERE id = (SELECT min(first.id) FROM generate_series(0, $1::int - 1) AS l(lane)
                          CROSS JOIN LATERAL (SELECT id FROM outbox_pending WHERE lane = l.lane ORDER BY id LIMIT 1) first)`,
          [OUTBOX_LANES],
        );
        this.set(rows[0]?.age ?? 0);
      },
    });
  }

  /** Claims, publishes and acknowledges one batch; returns how many events it published. */
  async publishBatch(loop = 0): Promise<number> {
    const producers = this.opts.producer;
    const producer = Array.isArray(producers) ? (producers[loop % producers.length] as Producer) : producers;
    const client = await this.opts.pool.connect();
    let rows: ClaimedRow[] = [];
    let spans: Span[] = [];
    try {
      rows = await claim(client, this.batchSize, this.opts.maxLanesPerClaim);
      if (rows.length === 0) {
        await client.query('COMMIT');
        return 0;
      }
      spans = traceSends(this.opts.tracer, rows);
      const { records, malformed } = recordsOf(rows);
      const refused = [...malformed, ...(await this.publish(producer, records))];
      await this.opts.faults?.afterPublish?.(rows);
      await markSentAndCommit(client, rows, refused);
      if (refused.length > 0) {
        this.setAside.inc(refused.length);
        for (const { record, reason } of refused) {
          this.opts.logger.error(
            { eventId: record.eventId, topic: record.topic, key: record.key, reason },
            'an event that cannot be published: set aside in outbox_set_aside, its lane goes on',
          );
        }
      }
      this.published.inc(records.length - (refused.length - malformed.length));
      for (const span of spans) span.end();
      return records.length + malformed.length;
    } catch (error) {
      for (const span of spans) endSpan(span, error);
      await client.query('ROLLBACK').catch(() => {});
      if (rows.length > 0 && !this.stopping) {
        this.failures.inc();
        await this.opts.pool
          .query('UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = ANY($1::bigint[])', [
            rows.map((r) => r.id),
            String((error as Error).message).slice(0, 2000),
          ])
          .catch(() => {});
      }
      throw error;
    } finally {
      client.release();
    }
  }

  /**
   * Sends the records in order, in produce requests that stay within the broker's limit; a request
   * the broker refuses for good is sent again record by record, and the records it still refuses
   * are answered, to be set aside. Any other failure throws: the batch stays pending. On stop the
   * batch is abandoned: rolled back, its rows still pending; should the broker still take what was
   * in flight, it is published again later: a duplicate.
   */
  private async publish(producer: Producer, records: OutboxRecord[]): Promise<SetAside[]> {
    const refused: SetAside[] = [];
    for (const request of produceRequests(records)) {
      try {
        await Promise.race([producer.send(groupByTopic(request)), this.stopped]);
      } catch (error) {
        if (!(error instanceof RecordsRefusedError)) throw error;
        for (const record of request) {
          try {
            await Promise.race([producer.send(groupByTopic([record])), this.stopped]);
          } catch (single) {
            if (!(single instanceof RecordsRefusedError)) throw single;
            refused.push({ record, reason: `${single.reason}: ${single.message}`.slice(0, 2000) });
          }
        }
      }
    }
    return refused;
  }

  /** Publishes until nothing is pending that this relay can claim. */
  async drain(): Promise<number> {
    let total = 0;
    for (;;) {
      const n = await this.publishBatch();
      total += n;
      if (n === 0) return total;
    }
  }

  /** How often `prune` is meant to run: the service runs it as a recurring job (outboxPlugin). */
  get pruneIntervalMs(): number {
    return this.opts.pruneIntervalMs;
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.stopping = false;
    this.stopped = new Promise<never>((_, reject) => {
      this.signalStop = reject;
    });
    this.stopped.catch(() => {});
    await this.listen();
    this.unsubscribe = onLocalOutboxWrite(() => this.wakeOne());
    this.loops = Array.from({ length: this.opts.concurrency }, (_, i) => this.loop(i));
  }

  /**
   * Stops claiming. A batch in flight finishes or rolls back; waiting for it is bounded, since a
   * publish to an unreachable broker can take its full request timeout (its rows stay pending).
   */
  async stop(waitMs = 3000): Promise<void> {
    this.running = false;
    this.stopping = true;
    this.signalStop(new Error('relay stopping'));
    this.unsubscribe();
    this.wakeAll();
    await withTimeout(Promise.all(this.loops), waitMs, 'relay batch still in flight').catch((err) =>
      this.opts.logger.warn({ err }, 'stopping the relay without waiting for its batch'),
    );
    this.loops = [];
    await this.listening?.stop();
    this.listening = undefined;
  }

  /** Deletes rows sent longer ago than the retention, with their sent marks, 50 batches at a time. */
  async prune(): Promise<number> {
    let total = 0;
    for (;;) {
      const { rows } = await this.opts.pool.query<{ batches: number; pruned: number }>(
        `WITH old AS (
           DELETE FROM outbox_sent WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM outbox_sent WHERE sent_at < now() - make_interval(secs => $1::float8 / 1000) LIMIT 50))
           RETURNING ids
         ), gone AS (
           DELETE FROM outbox WHERE id IN (SELECT unnest(ids) FROM old) RETURNING 1
         )
         SELECT (SELECT count(*) FROM old)::int AS batches, (SELECT count(*) FROM gone)::int AS pruned`,
        [this.opts.retentionMs],
      );
      total += rows[0]?.pruned ?? 0;
      if ((rows[0]?.batches ?? 0) < 50) return total;
    }
  }

  private async loop(index: number): Promise<void> {
    const log = this.opts.logger.child({ component: 'outbox-relay', loop: index });
    let failures = 0;
    while (this.running) {
      const signalled = this.signals;
      try {
        const n = await this.publishBatch(index);
        failures = 0;
        if (n >= this.batchSize) {
          this.wakeOne(); // more is waiting: another loop may take lanes this one could not
          continue;
        }
        // Rows committed while this batch ran wait for nobody else if every loop was busy.
        if (this.signals !== signalled) continue;
      } catch (err) {
        failures++;
        const delay = backoffDelay(failures - 1, {
          initialMs: this.opts.backoffInitialMs,
          maxMs: this.opts.backoffMaxMs,
        });
        log.warn({ err, failures, retryInMs: delay }, 'outbox publish failed; rows stay pending');
        await this.sleep(delay, this.backingOff);
        continue;
      }
      await this.sleep(this.opts.pollIntervalMs);
    }
  }

  /** Sleeps until the timer, stop() or, if `wakers` is the signal set, new rows. */
  private sleep(ms: number, wakers = this.wakers): Promise<void> {
    if (!this.running) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      wakers.add(done);
    });
  }

  /**
   * New rows: one sleeping loop claims them (waking every loop made all but one claim nothing). A
   * loop busy meanwhile claims again when its batch is done, and a loop that found a full batch
   * wakes another, so a backlog still gets every loop.
   */
  private wakeOne() {
    this.signals++;
    for (const wake of this.wakers) return wake();
  }

  private wakeAll() {
    for (const wake of [...this.wakers, ...this.backingOff]) wake();
  }

  private async listen(): Promise<void> {
    // A notification this process sent is one its relays were already woken for, locally.
    this.listening = listenWithReconnect(
      this.opts.pool,
      OUTBOX_CHANNEL,
      (n) => {
        if (n.payload !== OUTBOX_SIGNAL_SENDER) this.wakeOne();
      },
      { retryMs: this.opts.backoffMaxMs, logger: this.opts.logger, what: 'outbox' },
    );
    await this.listening.ready;
  }
}

/**
 * A producer span per claimed row that carries a trace (its `traceparent` header), the child of
 * the span that wrote it; the row's records carry the new span on, so that their consumers'
 * spans are its children. Rows without one, and every row when tracing is off, are sent as they
 * are: no cost per record (docs/adr/0055).
 */
function traceSends(tracer: Tracer | undefined, rows: ClaimedRow[]): Span[] {
  if (!tracer || !tracingEnabled()) return [];
  const spans: Span[] = [];
  for (const row of rows) {
    const parent = row.headers.traceparent;
    if (parent === undefined) continue;
    const span = tracer.startSpan(
      `send ${row.topic}`,
      {
        kind: SpanKind.PRODUCER,
        attributes: {
          'messaging.system': 'kafka',
          'messaging.operation.type': 'send',
          'messaging.destination.name': row.topic,
          'messaging.message.id': row.event_id,
          'messaging.batch.message_count': row.bundle ?? 1,
        },
      },
      contextOfTraceparent(parent),
    );
    const traceparent = traceparentOf(trace.setSpan(ROOT_CONTEXT, span));
    if (traceparent) row.headers = { ...row.headers, traceparent };
    spans.push(span);
  }
  return spans;
}

/** One record to publish: an event of an outbox row (a bundle's events each their own). */
interface OutboxRecord {
  rowId: number;
  eventId: string;
  topic: string;
  key: string;
  value: string;
  /** The row's own headers, without those the relay adds. */
  rowHeaders: Record<string, string>;
  headers: Record<string, string>;
}

/** Why a bundle row set aside by the relay was: it could not be decoded into its events. */
export const MALFORMED_BUNDLE = 'malformed bundle';

/**
 * The records of claimed rows, in row order; a bundle's events in theirs. A bundle that does not
 * decode (not the format Outbox.bundles writes: a bug, or a row written by hand) would fail every
 * claim of its lane; it is answered in `malformed`, to be set aside whole with the reason, like
 * an event the broker refuses (ADR 26), and its lane goes on.
 */
function recordsOf(rows: PendingRow[]): { records: OutboxRecord[]; malformed: SetAside[] } {
  const records: OutboxRecord[] = [];
  const malformed: SetAside[] = [];
  for (const row of rows) {
    if (row.bundle === null || row.bundle === undefined) {
      records.push({
        rowId: row.id,
        eventId: row.event_id,
        topic: row.topic,
        key: row.partition_key,
        value: row.body,
        rowHeaders: row.headers,
        headers: { ...row.headers, 'onto-event-id': row.event_id, ...cloudEventHeaders(row.event_id, row.body) },
      });
      continue;
    }
    try {
      records.push(...bundleRecords(row));
    } catch (error) {
      malformed.push({
        record: {
          rowId: row.id,
          eventId: row.event_id,
          topic: row.topic,
          key: row.partition_key,
          value: row.body,
          rowHeaders: row.headers,
          headers: row.headers,
        },
        reason: `${MALFORMED_BUNDLE}: ${(error as Error).message}`.slice(0, 2000),
      });
    }
  }
  return { records, malformed };
}

/** A bundle row's events as records (bundle.ts decodes the row). */
function bundleRecords(row: PendingRow): OutboxRecord[] {
  return decodeBundle(row.id, row.body, row.bundle ?? 0).map(({ eventId, key, value }) => ({
    rowId: row.id,
    eventId,
    topic: row.topic,
    key,
    value,
    rowHeaders: row.headers,
    headers: { ...row.headers, 'onto-event-id': eventId, ...cloudEventHeaders(eventId, value) },
  }));
}

/** Bytes of a produce request kept free of records: batch headers, one per partition. */
const REQUEST_FRAMING_BYTES = 1024;
/** Bytes a record takes beyond its key, value and headers' text (lengths, offsets, timestamp). */
const RECORD_FRAMING_BYTES = 32;
const HEADER_FRAMING_BYTES = 8;

/** UTF-16 units of a record's text and framing: a third of a bound on its bytes, cheap to take. */
function recordUnits(r: OutboxRecord): number {
  let units = r.key.length + r.value.length + RECORD_FRAMING_BYTES;
  for (const name of Object.keys(r.headers))
    units += name.length + (r.headers[name] as string).length + HEADER_FRAMING_BYTES;
  return units;
}

function recordBytes(r: OutboxRecord): number {
  let bytes = Buffer.byteLength(r.key) + Buffer.byteLength(r.value) + RECORD_FRAMING_BYTES;
  for (const name of Object.keys(r.headers)) {
    bytes += Buffer.byteLength(name) + Buffer.byteLength(r.headers[name] as string) + HEADER_FRAMING_BYTES;
  }
  return bytes;
}

/**
 * The records in order, split into produce requests of at most the smallest `max.message.bytes`
 * of their topics: the broker refuses a partition's record batch over it, and a request's records
 * bound each of its batches. A record over the limit alone makes a request of its own (refused,
 * then set aside), so that it takes nothing else down with it.
 */
function produceRequests(records: OutboxRecord[]): OutboxRecord[][] {
  let budget = Number.POSITIVE_INFINITY;
  let units = 0;
  for (const r of records) {
    budget = Math.min(budget, recordLimits.batchBytes(r.topic) - REQUEST_FRAMING_BYTES);
    units += recordUnits(r);
  }
  // At most 3 bytes of UTF-8 per UTF-16 unit: most batches fit one request without measuring.
  if (units * 3 <= budget) return [records];
  const requests: OutboxRecord[][] = [];
  let request: OutboxRecord[] = [];
  let bytes = 0;
  for (const r of records) {
    const size = recordBytes(r);
    if (request.length > 0 && bytes + size > budget) {
      requests.push(request);
      request = [];
      bytes = 0;
    }
    request.push(r);
    bytes += size;
  }
  if (request.length > 0) requests.push(request);
  return requests;
}

/** Records by topic, in their order. */
function groupByTopic(records: OutboxRecord[]) {
  const byTopic = new Map<string, { key: string; value: string; headers: Record<string, string> }[]>();
  for (const r of records) {
    let list = byTopic.get(r.topic);
    if (!list) {
      list = [];
      byTopic.set(r.topic, list);
    }
    list.push({ key: r.key, value: r.value, headers: r.headers });
  }
  return [...byTopic].map(([topic, messages]) => ({ topic, messages }));
}
