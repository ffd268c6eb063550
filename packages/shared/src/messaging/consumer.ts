import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { inTransactionTogether, queryTogether, type Statement, type TransactionOutcome } from '../db/pipeline.js';
import { inTransaction } from '../db/transaction.js';
import type { Broker, Consumer, Headers, IncomingBatch, IncomingMessage, Producer } from '../kafka/broker.js';
import { dlqOf } from '../kafka/topics.js';
import { type EventEnvelope, parseEvent } from './envelope.js';
import { ProcessedCache } from './processed-cache.js';

/** An event as a handler sees it, with where it came from. */
export interface ReceivedEvent {
  event: EventEnvelope;
  message: Pick<IncomingMessage, 'topic' | 'partition' | 'offset' | 'key' | 'headers'>;
}

/**
 * Applies the effects of events, in order, inside the transaction that also records them in
 * the inbox. It must only write through `tx`; anything it throws rolls all of it back. It may
 * answer statements still to run — writes whose answers nobody reads — and the consumer sends
 * them with COMMIT, in the same round trip; should one fail, nothing commits. `prepared` holds
 * the answers to the statements `prepare` asked for these events, when they were sent.
 */
export type ApplyEffects = (
  tx: pg.PoolClient,
  events: ReceivedEvent[],
  prepared?: readonly pg.QueryResult<Record<string, unknown>>[],
  // biome-ignore lint/suspicious/noConfusingVoidType: effects that leave nothing to write stay plain async functions
) => Promise<void | readonly Statement[]>;

/**
 * The first statements of the effects of a batch, sent with BEGIN and the inbox statement in
 * one round trip, on the bet that every event of the batch is new and applicable. When it is
 * not so (a duplicate, an event to park), that transaction is rolled back and the batch handled
 * again without them: they need not look at the inbox. Their answers reach `apply`.
 */
export type PrepareEffects = (events: ReceivedEvent[]) => readonly Statement[];

export interface DeferralPolicy {
  /** First retry of a parked event; each further one doubles. */
  initialDelayMs?: number;
  /** Retries before the cause is given up on. */
  maxAttempts?: number;
  /**
   * When the cause never arrives: `dead-letter` sends the event to `<topic>.dlq` and lets the
   * events queued behind it go on; `apply` applies it without its cause.
   */
  onExhausted?: 'dead-letter' | 'apply';
}

export interface ConsumerFaults {
  /** Runs inside the transaction after the effects, before it commits. */
  beforeCommit?: (events: ReceivedEvent[]) => void | Promise<void>;
  /** Runs after the transaction committed, before the offsets are. */
  afterCommit?: (events: ReceivedEvent[]) => void | Promise<void>;
}

export interface InboxConsumerOptions {
  /** Consumer group id, and the consumer's name in the inbox. */
  name: string;
  /** Physical topic names (with any prefix). */
  topics: string[];
  broker: Broker;
  pool: pg.Pool;
  redis?: Redis;
  apply: ApplyEffects;
  prepare?: PrepareEffects;
  logger: Logger;
  registry?: Registry;
  /**
   * Attempts at an event whose effect throws, before it is dead-lettered. `Infinity` never
   * dead-letters: the partition waits until the effect applies (for streams where skipping an
   * event is worse than stopping, such as revocations).
   */
  maxAttempts?: number;
  retryDelayMs?: number;
  deferral?: DeferralPolicy;
  redisTtlSeconds?: number;
  partitionsConsumedConcurrently?: number;
  /**
   * Batches that arrive while one of this consumer's transactions runs wait for it, then go
   * together in the next (at most MERGED_EVENTS_MAX events). For effects that serialise anyway,
   * such as intelligence's, which lock their world: batches of several partitions no longer queue
   * on that lock one after the other, each with its own round trips and commit. A merged
   * transaction that fails is run again batch by batch, so that a fault stays its own batch's.
   */
  mergeBatches?: boolean;
  /**
   * With mergeBatches, what serialises an event (intelligence: its world). Batches whose events
   * share no key with a transaction in flight run beside it, in a transaction of their own;
   * without a key, one transaction runs at a time.
   */
  mergeKey?: (item: ReceivedEvent) => string;
  /** How long a silent member keeps its partitions; bounds the pause after a crash. */
  sessionTimeoutMs?: number;
  /** How long a rebalance waits for members to rejoin; bounds the pause after a crash mid-join. */
  rebalanceTimeoutMs?: number;
  /** Bounds a fetch, and so a batch, per partition. */
  maxBytesPerPartition?: number;
  /**
   * How long an event is remembered in the inbox (default 7 days, Kafka's default retention and
   * the Redis markers' TTL): the window in which a redelivery is recognised. Keep it at least as
   * long as the consumed topics' retention, or a consumer group reset to the earliest offset
   * would apply events whose rows were pruned a second time.
   */
  retentionMs?: number;
  /** How often inbox rows older than the retention are pruned (default every 10 minutes). */
  pruneIntervalMs?: number;
  faults?: ConsumerFaults;
}

/** The smallest UUIDv7 of a millisecond: every id drawn at or after it sorts after it. */
export function uuidv7Floor(ms: number): string {
  const hex = Math.max(0, Math.floor(ms)).toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7000-8000-000000000000`;
}

/**
 * Deletes a consumer's inbox rows of events older than the retention, `chunk` rows per statement
 * until none is left; answers how many. Event ids are UUIDv7, so "older" is a range of the
 * primary key, read in its order; a row is only taken when it was also processed before the
 * retention, so an event from a producer whose clock ran behind is still kept its full window.
 */
export async function pruneInbox(pool: pg.Pool, consumer: string, retentionMs: number, chunk = 5000): Promise<number> {
  const floor = uuidv7Floor(Date.now() - retentionMs);
  let total = 0;
  for (;;) {
    const { rowCount } = await pool.query(
      `DELETE FROM inbox WHERE consumer = $1 AND event_id IN (
         SELECT event_id FROM inbox
          WHERE consumer = $1 AND event_id < $2::uuid
            AND processed_at < now() - make_interval(secs => $3::double precision / 1000)
          ORDER BY event_id LIMIT $4 FOR UPDATE SKIP LOCKED)`,
      [consumer, floor, retentionMs, chunk],
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < chunk) return total;
  }
}

/** A batch held a duplicate or an event to park: its prepared statements must not count. */
class LostBet extends Error {
  override readonly name = 'LostBet';
}

/** A merged transaction failed: each of its batches is run again alone. */
class MergeFailed extends Error {
  override readonly name = 'MergeFailed';
}

/** Most events one merged transaction takes (see InboxConsumerOptions.mergeBatches). */
const MERGED_EVENTS_MAX = 2000;

interface Waiting {
  events: ReceivedEvent[];
  /** The mergeKeys of its events. */
  keys: Set<string>;
  resolve: (ids: string[]) => void;
  reject: (error: unknown) => void;
}

/** What the inbox statement answers (see recordStatement). */
interface Recorded {
  seen: string[];
  parked: string[];
  known: string[];
  blocked: string[];
  /** The events of the batch with no inbox row inserted: usually none, so little to send and parse. */
  notInserted: string[];
  /** How many inbox rows the statement inserted. */
  inserted: number;
}

type Outcome = 'applied' | 'duplicate' | 'parked' | 'dead_lettered';

const INFRASTRUCTURE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  '57P01', // admin shutdown
  '57P02',
  '57P03', // cannot connect now
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
  '53300', // too many connections
]);

/** Failures of the platform rather than of the event: retried without counting an attempt. */
export function isInfrastructureError(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown; name?: unknown } | null;
  if (typeof e?.code === 'string' && INFRASTRUCTURE_CODES.has(e.code)) return true;
  const message = typeof e?.message === 'string' ? e.message : '';
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    message,
  );
}

/** How often a consumer that knows of no parked events looks anyway (see mayHaveParked). */
const DEFERRED_SWEEP_MS = 5000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const keyOf = (r: { topic: string; partition_key: string }) => `${r.topic}\u001f${r.partition_key}`;

/**
 * At-least-once from Kafka, exactly-once in effect. Per batch: Redis says which events are
 * certainly done; the rest go through one PostgreSQL transaction that records each event in the
 * inbox (a duplicate is skipped) and applies the effects; offsets are committed afterwards.
 * An event whose cause has not been handled is parked, with the events of its key queued
 * behind it, without holding up the partition. An event that keeps failing goes to the DLQ.
 */
export class InboxConsumer {
  private consumer: Consumer | undefined;
  private dlqProducer: Producer | undefined;
  private readonly cache: ProcessedCache;
  private readonly log: Logger;
  private readonly maxAttempts: number;
  private readonly retryDelayMs: number;
  private readonly deferral: Required<DeferralPolicy>;
  private deferralTimer: NodeJS.Timeout | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;
  private deferralRunning: Promise<void> | undefined;
  /**
   * This process may have parked events: true from the start (another process may have left
   * some), after parking, and until a pass finds none. While false, no pass runs after a batch
   * and the timer sleeps until the next sweep — the passes were most of an idle service's queries,
   * the timer most of its wakeups — and a sweep every DEFERRED_SWEEP_MS still finds what another
   * instance of the group parked and left behind.
   */
  private mayHaveParked = true;
  /** Counts parkings, so that a pass that read before one is committed does not clear mayHaveParked. */
  private parkings = 0;
  /** When the armed deferral timer fires (see armDeferral). */
  private deferralDue = 0;
  /** Whether to send the effects' prepared statements with the inbox statement (see PrepareEffects). */
  private speculate = true;
  private lastSweep = 0;
  private running = false;
  /** Batches waiting for a transaction in flight that holds one of their keys (mergeBatches). */
  private waiting: Waiting[] = [];
  /** The merge keys of the transactions in flight. */
  private readonly busy = new Set<string>();
  private readonly events: Counter<'consumer' | 'outcome'>;
  private readonly duplicates: Counter<'consumer' | 'detected_by'>;
  private readonly redisFallbacks: Counter<'consumer'>;

  constructor(private readonly opts: InboxConsumerOptions) {
    this.log = opts.logger.child({ component: 'inbox-consumer', consumer: opts.name });
    this.maxAttempts = opts.maxAttempts ?? 5;
    this.retryDelayMs = opts.retryDelayMs ?? 50;
    this.deferral = { initialDelayMs: 100, maxAttempts: 8, onExhausted: 'dead-letter', ...opts.deferral };
    const registry = opts.registry;
    const registers = registry ? [registry] : [];
    const labels = { consumer: opts.name };
    this.events = reuse(
      registry,
      'onto_inbox_events_total',
      () =>
        new Counter({
          name: 'onto_inbox_events_total',
          help: 'Events handled by an inbox consumer, by outcome',
          labelNames: ['consumer', 'outcome'] as const,
          registers,
        }),
    );
    this.duplicates = reuse(
      registry,
      'onto_inbox_duplicates_total',
      () =>
        new Counter({
          name: 'onto_inbox_duplicates_total',
          help: 'Redelivered events skipped (idempotency hits), by what detected them',
          labelNames: ['consumer', 'detected_by'] as const,
          registers,
        }),
    );
    this.redisFallbacks = reuse(
      registry,
      'onto_inbox_redis_fallbacks_total',
      () =>
        new Counter({
          name: 'onto_inbox_redis_fallbacks_total',
          help: 'Batches that went to the PostgreSQL inbox alone because Redis did not answer',
          labelNames: ['consumer'] as const,
          registers,
        }),
    );
    const pool = opts.pool;
    reuse(
      registry,
      'onto_inbox_deferred',
      () =>
        new Gauge({
          name: 'onto_inbox_deferred',
          help: 'Events parked until their cause is handled, by consumer',
          labelNames: ['consumer'] as const,
          registers,
          async collect() {
            const { rows } = await pool.query<{ consumer: string; n: number }>(
              'SELECT consumer, count(*)::int AS n FROM inbox_deferred GROUP BY consumer',
            );
            this.reset();
            for (const r of rows) this.set({ consumer: r.consumer }, r.n);
          },
        }),
    );
    this.cache = new ProcessedCache(opts.redis, opts.name, opts.redisTtlSeconds ?? 7 * 24 * 3600, (err) => {
      this.redisFallbacks.inc(labels);
      this.log.debug({ err }, 'redis unavailable; using the PostgreSQL inbox alone');
    });
  }

  private count(outcome: Outcome, n = 1) {
    if (n > 0) this.events.inc({ consumer: this.opts.name, outcome }, n);
  }

  async start(): Promise<void> {
    this.running = true;
    await this.cache.bind(this.opts.pool);
    this.dlqProducer = await this.opts.broker.producer();
    this.consumer = await this.opts.broker.consumer({
      groupId: this.opts.name,
      topics: this.opts.topics,
      fromBeginning: true,
      partitionsConsumedConcurrently: this.opts.partitionsConsumedConcurrently ?? 3,
      ...(this.opts.maxBytesPerPartition ? { maxBytesPerPartition: this.opts.maxBytesPerPartition } : {}),
      ...(this.opts.sessionTimeoutMs ? { sessionTimeoutMs: this.opts.sessionTimeoutMs } : {}),
      ...(this.opts.rebalanceTimeoutMs ? { rebalanceTimeoutMs: this.opts.rebalanceTimeoutMs } : {}),
    });
    await this.consumer.run((batch) => this.handleBatch(batch));
    this.armDeferral();
    this.pruneTimer = setInterval(() => {
      this.prune().catch((err) => this.log.warn({ err }, 'inbox prune failed'));
    }, this.opts.pruneIntervalMs ?? 600_000);
    this.pruneTimer.unref();
  }

  /** Prunes this consumer's inbox rows older than the retention (see pruneInbox). */
  async prune(): Promise<number> {
    const n = await pruneInbox(this.opts.pool, this.opts.name, this.opts.retentionMs ?? 7 * 24 * 3600_000);
    if (n > 0) this.log.info({ pruned: n }, 'inbox rows past retention pruned');
    return n;
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.deferralTimer);
    this.deferralTimer = undefined;
    clearInterval(this.pruneTimer);
    await this.deferralRunning;
    await this.consumer?.disconnect();
    await this.dlqProducer?.disconnect();
    await this.cache.flush();
    this.consumer = undefined;
    this.dlqProducer = undefined;
  }

  /** Handles one batch of one partition; public so that tests can drive it directly. */
  async handleBatch(batch: IncomingBatch): Promise<void> {
    const parkingsBefore = this.parkings;
    const valid: ReceivedEvent[] = [];
    const invalid: { message: IncomingMessage; error: Error }[] = [];
    for (const message of batch.messages) {
      try {
        valid.push({ event: parseEvent(message.value), message });
      } catch (error) {
        invalid.push({ message, error: error as Error });
      }
    }
    const done = await this.cache.claim(valid.map((d) => d.event.event_id));
    if (done.size > 0) {
      this.duplicates.inc({ consumer: this.opts.name, detected_by: 'redis' }, done.size);
      this.count('duplicate', done.size);
    }
    const todo = done.size > 0 ? valid.filter((d) => !done.has(d.event.event_id)) : valid;

    if (todo.length > 0) {
      await this.untilSettled(batch, async () => {
        try {
          const handled = this.opts.mergeBatches ? await this.merged(todo) : await this.process(todo);
          await this.opts.faults?.afterCommit?.(todo);
          this.cache.markDone(handled);
        } catch (error) {
          if (isInfrastructureError(error)) throw error;
          this.log.warn({ err: error, size: todo.length }, 'batch failed; handling its events one by one');
          await this.oneByOne(batch, todo);
        }
      });
    }
    for (const bad of invalid) {
      await this.untilSettled(batch, () => this.deadLetter(bad.message, bad.error, null));
    }
    const last = batch.messages.at(-1);
    if (last && batch.isRunning() && !batch.isStale()) await batch.commit(last);
    if (this.parkings !== parkingsBefore) {
      // Events were parked (here, or by a batch beside this one) and are committed now. A pass
      // that read before the commit did not see them and may have cleared the flag: raise it,
      // and count once more so that such a pass still in flight cannot clear it again; the next
      // pass, now or at the timer, takes them.
      this.mayHaveParked = true;
      this.parkings++;
      this.armDeferral();
    }
    this.kickDeferred();
  }

  /** Retries work that failed for infrastructure reasons (PostgreSQL or Kafka away) until it settles. */
  private async untilSettled(batch: IncomingBatch, work: () => Promise<void>): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await work();
      } catch (error) {
        if (!isInfrastructureError(error) || !batch.isRunning()) throw error;
        const delay = Math.min(100 * 2 ** attempt, 5000);
        this.log.warn({ err: error, retryInMs: delay }, 'infrastructure unavailable; retrying');
        await sleep(delay);
        await batch.heartbeat().catch(() => {});
      }
    }
  }

  private async oneByOne(batch: IncomingBatch, events: ReceivedEvent[]): Promise<void> {
    for (const item of events) {
      for (let attempt = 1; ; attempt++) {
        try {
          await this.untilSettled(batch, async () => {
            const ids = await this.process([item]);
            this.cache.markDone(ids);
          });
          break;
        } catch (error) {
          if (attempt >= this.maxAttempts) {
            await this.untilSettled(batch, () => this.deadLetter(item.message, error as Error, item.event));
            break;
          }
          this.log.warn({ err: error, eventId: item.event.event_id, attempt }, 'event failed; retrying');
          await sleep(Math.min(this.retryDelayMs * 2 ** (attempt - 1), 5000));
        }
      }
      if (batch.isRunning() && !batch.isStale()) await batch.commit(item.message as IncomingMessage);
    }
  }

  private transaction<T>(work: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
    return inTransaction(this.opts.pool, work);
  }

  /**
   * process(), in one transaction with every batch that is ready and shares no key with a
   * transaction in flight (mergeBatches, mergeKey). A merged transaction that fails commits
   * nothing; its batches are then run again one by one.
   */
  private async merged(events: ReceivedEvent[]): Promise<string[]> {
    const keyOf = this.opts.mergeKey;
    const keys = new Set(keyOf ? events.map(keyOf) : ['']);
    try {
      return await new Promise<string[]>((resolve, reject) => {
        this.waiting.push({ events, keys, resolve, reject });
        this.startMerged();
      });
    } catch (error) {
      if (!(error instanceof MergeFailed)) throw error;
      return this.process(events);
    }
  }

  /**
   * Starts a transaction for the waiting batches whose keys are free, in arrival order: a batch
   * whose key is held by a transaction in flight, or by an earlier batch left waiting, waits
   * (so that batches of one key keep their order), and so does one past the size cap.
   */
  private startMerged(): void {
    const group: Waiting[] = [];
    const rest: Waiting[] = [];
    const taken = new Set<string>();
    const held = new Set<string>();
    let size = 0;
    for (const w of this.waiting) {
      const free = [...w.keys].every((k) => !this.busy.has(k) && !held.has(k));
      if (free && (group.length === 0 || size + w.events.length <= MERGED_EVENTS_MAX)) {
        group.push(w);
        size += w.events.length;
        for (const k of w.keys) taken.add(k);
      } else {
        rest.push(w);
        for (const k of w.keys) held.add(k);
      }
    }
    if (group.length === 0) return;
    this.waiting = rest;
    for (const k of taken) this.busy.add(k);
    void this.runMerged(group).finally(() => {
      for (const k of taken) this.busy.delete(k);
      this.startMerged();
    });
    // What was left behind for size alone, with keys still free, starts beside it.
    if (rest.some((w) => [...w.keys].every((k) => !this.busy.has(k)))) this.startMerged();
  }

  private async runMerged(group: Waiting[]): Promise<void> {
    if (group.length === 1) {
      const only = group[0] as Waiting;
      await this.process(only.events).then(only.resolve, only.reject);
      return;
    }
    try {
      const done = new Set(await this.process(group.flatMap((g) => g.events)));
      for (const g of group) g.resolve(g.events.map((e) => e.event.event_id).filter((id) => done.has(id)));
    } catch (error) {
      this.log.debug({ err: error, batches: group.length }, 'merged batches failed; running each alone');
      for (const g of group) g.reject(new MergeFailed(String(error)));
    }
  }

  /**
   * One transaction for the events: sorts them into duplicates, parked and to-apply, records the
   * latter in the inbox and applies them; returns the ids that are now certainly done (applied or
   * duplicates). Round trips when nothing is parked: BEGIN with the inbox statement (and the
   * effects' prepared statements), the effects' own if any, COMMIT with what they and the parking
   * leave to write.
   */
  private async process(events: ReceivedEvent[]): Promise<string[]> {
    const ahead = this.speculate ? this.prepared(events) : [];
    try {
      return await inTransactionTogether(
        this.opts.pool,
        [this.recordStatement(events), ...ahead],
        (tx, [recorded, ...answers]) =>
          this.applyRecorded(
            tx,
            events,
            recorded?.rows[0] as unknown as Recorded,
            ahead.length > 0 ? answers : undefined,
          ),
      );
    } catch (error) {
      if (!(error instanceof LostBet)) throw error;
      return this.process(events); // without the prepared statements: the bet is off
    }
  }

  private prepared(events: ReceivedEvent[]): readonly Statement[] {
    try {
      return this.opts.prepare?.(events) ?? [];
    } catch {
      return []; // the effects meet the same fault, and report it, without them
    }
  }

  /**
   * What the inbox knows of the events, and inbox rows for those that may be applied, in one
   * statement. A row is inserted for every event that is not parked, whose key has nothing
   * parked and whose cause is handled or comes earlier in the batch; `applyRecorded` takes back
   * the few it then parks after all (their cause, or an event before them on their key, parked
   * in this batch). All parts read the statement's one snapshot: `seen` is what was there before.
   */
  private recordStatement(events: ReceivedEvent[]): Statement {
    return {
      text: `WITH batch AS (
         SELECT u.event_id, u.event_type, u.topic, u.part, u.off, u.partition_key, u.caused_by, u.n
           FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::bigint[], $7::text[], $8::uuid[])
           WITH ORDINALITY AS u(event_id, event_type, topic, part, off, partition_key, caused_by, n)
       ), known AS (
         -- One index probe per cause (LATERAL … LIMIT 1 cannot become a hashed subplan, which
         -- read the consumer's whole inbox once per batch: 0.5 s a batch at 200,000 rows).
         SELECT DISTINCT b.caused_by FROM batch b
          CROSS JOIN LATERAL (
            SELECT 1 FROM inbox i WHERE i.consumer = $1 AND i.event_id = b.caused_by
            UNION ALL
            SELECT 1 FROM outbox o WHERE o.event_id = b.caused_by
            LIMIT 1
          ) found
          WHERE b.caused_by IS NOT NULL
       ), inserted AS (
         INSERT INTO inbox (consumer, event_id, event_type, topic, partition, "offset", outcome)
         SELECT $1, b.event_id, b.event_type, b.topic, b.part, b.off, 'applied' FROM batch b
          WHERE NOT EXISTS (SELECT 1 FROM inbox_deferred d WHERE d.consumer = $1 AND d.event_id = b.event_id)
            AND NOT EXISTS (SELECT 1 FROM inbox_deferred d
                             WHERE d.consumer = $1 AND d.topic = b.topic AND d.partition_key = b.partition_key)
            AND (b.caused_by IS NULL
                 OR b.caused_by IN (SELECT caused_by FROM known)
                 OR EXISTS (SELECT 1 FROM batch c WHERE c.event_id = b.caused_by AND c.n < b.n))
          ORDER BY b.n
         ON CONFLICT (consumer, event_id) DO NOTHING
         RETURNING event_id
       ), skipped AS MATERIALIZED (
         -- Only an event that got no inbox row can have been seen or parked before: the inbox and
         -- inbox_deferred are probed for these, usually none, rather than for the whole batch.
         SELECT b.event_id FROM batch b WHERE NOT EXISTS (SELECT 1 FROM inserted i WHERE i.event_id = b.event_id)
       )
       SELECT
         ARRAY(SELECT i.event_id::text FROM skipped s JOIN inbox i ON i.consumer = $1 AND i.event_id = s.event_id) AS seen,
         ARRAY(SELECT d.event_id::text FROM skipped s
                 JOIN inbox_deferred d ON d.consumer = $1 AND d.event_id = s.event_id) AS parked,
         ARRAY(SELECT caused_by::text FROM known) AS known,
         ARRAY(SELECT DISTINCT d.topic || chr(31) || d.partition_key FROM inbox_deferred d
                 JOIN (SELECT DISTINCT topic, partition_key FROM batch) k
                   ON d.topic = k.topic AND d.partition_key = k.partition_key
                WHERE d.consumer = $1) AS blocked,
         ARRAY(SELECT event_id::text FROM skipped) AS "notInserted",
         (SELECT count(*) FROM inserted)::int AS inserted`,
      values: [
        this.opts.name,
        events.map((e) => e.event.event_id),
        events.map((e) => e.event.type),
        events.map((e) => e.message.topic),
        events.map((e) => e.message.partition),
        events.map((e) => e.message.offset),
        events.map(partitionKey),
        events.map((e) => e.event.caused_by),
      ],
    };
  }

  private async applyRecorded(
    tx: pg.PoolClient,
    events: ReceivedEvent[],
    recorded: Recorded,
    prepared: readonly pg.QueryResult<Record<string, unknown>>[] | undefined,
  ): Promise<TransactionOutcome<string[]>> {
    const notInserted = new Set(recorded.notInserted);
    const inserted = { has: (id: string) => !notInserted.has(id) };
    let fresh: ReceivedEvent[];
    const toPark: ReceivedEvent[] = [];
    let duplicates = 0;
    if (recorded.inserted === events.length) {
      // Every event got an inbox row of its own: none was seen or parked before, none is twice
      // in the batch, no key is blocked and every cause is handled or earlier in the batch. So
      // all of them apply, as they nearly always do, without sorting them one by one.
      fresh = events;
    } else {
      const seen = new Set([...recorded.seen, ...recorded.parked]);
      const known = new Set(recorded.known);
      const blocked = new Set(recorded.blocked);
      const toApply: ReceivedEvent[] = [];
      for (const item of events) {
        const id = item.event.event_id;
        if (seen.has(id)) {
          duplicates++;
          continue;
        }
        seen.add(id);
        const key = keyOf({ topic: item.message.topic, partition_key: partitionKey(item) });
        const cause = item.event.caused_by;
        if (blocked.has(key) || (cause !== null && !known.has(cause))) {
          blocked.add(key);
          toPark.push(item);
          continue;
        }
        known.add(id);
        toApply.push(item);
      }
      // An event recorded by another transaction since the statement's snapshot is a duplicate.
      fresh = toApply.filter((e) => inserted.has(e.event.event_id));
      duplicates += toApply.length - fresh.length;
    }
    // The prepared statements bet on every event being fresh; lost, they are rolled back.
    // Betting stops after a loss until a batch comes whose events all are.
    if (fresh.length === events.length) this.speculate = true;
    else if (prepared) {
      this.speculate = false;
      throw new LostBet();
    }
    const last: Statement[] = [];
    const taken = toPark.map((e) => e.event.event_id).filter((id) => inserted.has(id));
    if (taken.length > 0) {
      last.push({
        text: 'DELETE FROM inbox WHERE consumer = $1 AND event_id = ANY($2::uuid[])',
        values: [this.opts.name, taken],
      });
    }
    if (fresh.length > 0) last.push(...((await this.opts.apply(tx, fresh, prepared)) ?? []));
    if (toPark.length > 0) last.push(this.parkStatement(toPark));
    await this.opts.faults?.beforeCommit?.(fresh);
    if (duplicates > 0) this.duplicates.inc({ consumer: this.opts.name, detected_by: 'postgres' }, duplicates);
    this.count('duplicate', duplicates);
    this.count('applied', fresh.length);
    this.count('parked', toPark.length);
    const parkedIds = new Set(toPark.map((e) => e.event.event_id));
    const value = events.map((e) => e.event.event_id);
    return { value: parkedIds.size > 0 ? value.filter((id) => !parkedIds.has(id)) : value, last };
  }

  /** Inserts inbox rows; returns the ids that were not there yet. */
  private async record(tx: pg.PoolClient, events: ReceivedEvent[], outcome: 'applied' | 'dead_lettered') {
    if (events.length === 0) return [];
    const { rows } = await tx.query<{ event_id: string }>(
      `INSERT INTO inbox (consumer, event_id, event_type, topic, partition, "offset", outcome)
       SELECT $1, e, t, tp, p, o, $7 FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::bigint[])
         AS u(e, t, tp, p, o)
       ON CONFLICT (consumer, event_id) DO NOTHING
       RETURNING event_id::text`,
      [
        this.opts.name,
        events.map((e) => e.event.event_id),
        events.map((e) => e.event.type),
        events.map((e) => e.message.topic),
        events.map((e) => e.message.partition),
        events.map((e) => e.message.offset),
        outcome,
      ],
    );
    return rows.map((r) => r.event_id);
  }

  /** Parks the events, in their order; they count as parked once the transaction commits. */
  private parkStatement(events: ReceivedEvent[]): Statement {
    this.parkings++; // handleBatch raises mayHaveParked once this parking is committed
    this.log.debug({ parked: events.map((e) => e.event.event_id) }, 'events parked until their cause is handled');
    return {
      text: `INSERT INTO inbox_deferred
         (consumer, event_id, topic, partition, "offset", partition_key, caused_by, body, headers, next_attempt_at)
       SELECT $1, e, t, p, o, k, c, b, h, now() + make_interval(secs => $10::float8 / 1000)
         FROM unnest($2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::uuid[], $8::text[], $9::jsonb[])
           WITH ORDINALITY AS u(e, t, p, o, k, c, b, h, n)
        ORDER BY n
       ON CONFLICT (consumer, event_id) DO NOTHING`,
      values: [
        this.opts.name,
        events.map((e) => e.event.event_id),
        events.map((e) => e.message.topic),
        events.map((e) => e.message.partition),
        events.map((e) => e.message.offset),
        events.map(partitionKey),
        events.map((e) => e.event.caused_by),
        events.map((e) => JSON.stringify(e.event)),
        events.map((e) => JSON.stringify(e.message.headers)),
        this.deferral.initialDelayMs,
      ],
    };
  }

  private async deadLetter(
    message: IncomingMessage | ReceivedEvent['message'],
    error: Error,
    event: EventEnvelope | null,
  ) {
    const producer = this.dlqProducer;
    if (!producer) throw new Error('consumer is not started');
    const headers: Headers = {
      ...message.headers,
      'onto-error': String(error.message).slice(0, 4000),
      'onto-error-type': error.name,
      'onto-original-topic': message.topic,
      'onto-original-partition': String(message.partition),
      'onto-original-offset': message.offset,
      'onto-consumer': this.opts.name,
    };
    const value = 'value' in message && message.value ? message.value : event ? JSON.stringify(event) : '';
    await producer.send([{ topic: dlqOf(message.topic), messages: [{ key: message.key ?? '', value, headers }] }]);
    if (event) {
      // Recorded so that a redelivery is a duplicate rather than a second dead letter.
      await this.transaction((tx) =>
        this.record(tx, [{ event, message: { ...message, key: message.key ?? null } }], 'dead_lettered'),
      );
      this.cache.markDone([event.event_id]);
    }
    this.count('dead_lettered');
    this.log.error({ err: error, topic: message.topic, offset: message.offset }, 'event dead-lettered');
  }

  private kickDeferred(sweep = false) {
    if (this.deferralRunning || !this.running || !(this.mayHaveParked || sweep)) return;
    if (sweep) this.lastSweep = Date.now();
    this.deferralRunning = this.retryDeferred()
      .then(() => {})
      .catch((err) => this.log.warn({ err }, 'retrying parked events failed'))
      .finally(() => {
        this.deferralRunning = undefined;
        this.armDeferral();
      });
  }

  /**
   * Arms the one timer of the parked-event passes: every `initialDelayMs` while this process may
   * have parked events (their backoff starts there), otherwise only for the next sweep. An idle
   * consumer used to wake every 100 ms to find it had nothing to do; with a dozen consumers in
   * three services that was most of the stack's timer wakeups (ADR 19).
   */
  private armDeferral() {
    if (!this.running) return;
    const now = Date.now();
    const due = this.mayHaveParked ? now + this.deferral.initialDelayMs : this.lastSweep + DEFERRED_SWEEP_MS;
    if (this.deferralTimer !== undefined && this.deferralDue <= due) return;
    clearTimeout(this.deferralTimer);
    this.deferralDue = due;
    this.deferralTimer = setTimeout(
      () => {
        this.deferralTimer = undefined;
        if (Date.now() - this.lastSweep >= DEFERRED_SWEEP_MS) this.kickDeferred(true);
        else this.kickDeferred();
        this.armDeferral();
      },
      Math.max(0, due - now),
    );
    this.deferralTimer.unref();
  }

  /**
   * One pass over the parked events in the order they were parked: applies those whose cause is
   * now handled and that have nothing parked before them on their key; backs off the others and,
   * past the bound, applies the exhaustion policy.
   */
  async retryDeferred(): Promise<number> {
    interface Parked {
      event_id: string;
      topic: string;
      partition: number;
      offset: string;
      partition_key: string;
      caused_by: string | null;
      body: string;
      headers: Headers;
      attempts: number;
      due: boolean;
    }
    let progressed = 0;
    const parkingsBefore = this.parkings;
    await this.transaction(async (tx) => {
      const { rows } = await tx.query<Parked>(
        `SELECT event_id::text, topic, partition, "offset"::text, partition_key, caused_by::text, body, headers,
                attempts, next_attempt_at <= now() AS due
           FROM inbox_deferred WHERE consumer = $1 ORDER BY seq LIMIT 500 FOR UPDATE SKIP LOCKED`,
        [this.opts.name],
      );
      // Events parked since this pass read are not in its rows: they keep the flag up.
      if (this.parkings === parkingsBefore) this.mayHaveParked = rows.length > 0;
      if (rows.length === 0) return;
      const blocked = new Set<string>();
      for (const row of rows) {
        const key = keyOf(row);
        if (blocked.has(key)) continue;
        const event = JSON.parse(row.body) as EventEnvelope;
        const item: ReceivedEvent = {
          event,
          message: {
            topic: row.topic,
            partition: row.partition,
            offset: row.offset,
            key: row.partition_key,
            headers: row.headers,
          },
        };
        const known =
          row.caused_by === null ||
          (
            await tx.query(
              `SELECT 1 FROM inbox WHERE consumer = $1 AND event_id = $2::uuid
               UNION ALL SELECT 1 FROM outbox WHERE event_id = $2::uuid LIMIT 1`,
              [this.opts.name, row.caused_by],
            )
          ).rowCount;
        const exhausted = row.due && row.attempts + 1 >= this.deferral.maxAttempts;
        if (known || (exhausted && this.deferral.onExhausted === 'apply')) {
          await tx.query('SAVEPOINT parked');
          try {
            const fresh = await this.record(tx, [item], 'applied');
            const last = fresh.length > 0 ? ((await this.opts.apply(tx, [item])) ?? []) : [];
            await queryTogether(tx, [
              ...last,
              {
                text: 'DELETE FROM inbox_deferred WHERE consumer = $1 AND event_id = $2',
                values: [this.opts.name, row.event_id],
              },
              { text: 'RELEASE SAVEPOINT parked' },
            ]);
            this.count('applied', fresh.length);
            progressed++;
            continue;
          } catch (error) {
            await tx.query('ROLLBACK TO SAVEPOINT parked');
            if (isInfrastructureError(error)) throw error;
            this.log.warn({ err: error, eventId: row.event_id }, 'parked event failed');
            if (row.attempts + 1 >= this.deferral.maxAttempts) {
              await this.dropParked(tx, item, error as Error);
              progressed++;
              continue;
            }
          }
        } else if (exhausted) {
          await this.dropParked(tx, item, new Error(`cause ${row.caused_by} never arrived`));
          progressed++;
          continue;
        }
        blocked.add(key);
        if (row.due) {
          await tx.query(
            `UPDATE inbox_deferred SET attempts = attempts + 1,
                    next_attempt_at = now() + make_interval(secs => $3::float8 * power(2, attempts + 1) / 1000)
              WHERE consumer = $1 AND event_id = $2`,
            [this.opts.name, row.event_id, this.deferral.initialDelayMs],
          );
        }
      }
    });
    if (progressed > 0) this.kickDeferred();
    return progressed;
  }

  private async dropParked(tx: pg.PoolClient, item: ReceivedEvent, error: Error) {
    await tx.query('DELETE FROM inbox_deferred WHERE consumer = $1 AND event_id = $2', [
      this.opts.name,
      item.event.event_id,
    ]);
    const producer = this.dlqProducer;
    if (!producer) throw new Error('consumer is not started');
    await producer.send([
      {
        topic: dlqOf(item.message.topic),
        messages: [
          {
            key: item.message.key ?? '',
            value: JSON.stringify(item.event),
            headers: {
              ...item.message.headers,
              'onto-error': error.message,
              'onto-error-type': 'CauseMissing',
              'onto-original-topic': item.message.topic,
              'onto-original-partition': String(item.message.partition),
              'onto-original-offset': item.message.offset,
              'onto-consumer': this.opts.name,
            },
          },
        ],
      },
    ]);
    await this.record(tx, [item], 'dead_lettered');
    this.count('dead_lettered');
  }
}

/** One metric per registry, shared by every consumer registered on it. */
function reuse<M>(registry: Registry | undefined, name: string, create: () => M): M {
  return (registry?.getSingleMetric(name) as M | undefined) ?? create();
}

function partitionKey(e: ReceivedEvent): string {
  return e.message.key ?? e.event.key;
}
