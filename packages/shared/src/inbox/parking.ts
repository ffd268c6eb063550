import type pg from 'pg';
import type { Logger } from 'pino';
import { queryTogether, type Statement } from '../db/pipeline.js';
import { inTransaction } from '../db/transaction.js';
import type { EventEnvelope } from '../events/envelope.js';
import { isInfrastructureError } from '../infrastructure-errors.js';
import type { Admin, Broker, Consumer, Headers, PartitionOffsets } from '../kafka/broker.js';
import { withTimeout } from '../readiness.js';
import type { DeadLetters } from './dead-letters.js';
import type { ConsumerMetrics } from './metrics.js';
import type { ApplyEffects, DeferralPolicy, ReceivedEvent } from './options.js';
import { keyOf, partitionKey, recordEvents } from './statements.js';

/** How often a consumer that knows of no parked events looks anyway (see mayHaveParked). */
const DEFERRED_SWEEP_MS = 5000;
/** Longest wait between two looks at a parked event: its cause may come at any time. */
const PARKED_RETRY_MAX_MS = 5000;
/** How long a pass waits for the broker to say where the consumer stands. */
const POSITION_TIMEOUT_MS = 3000;

/** A topic-partition as one string. */
export const partitionOf = (topic: string, partition: number) => `${topic}\u001f${partition}`;

/** Where a consumer stands on its topics: each partition's offsets and the group's committed offset. */
export interface ConsumerPosition {
  ends: Map<string, PartitionOffsets>;
  committed: Map<string, string>;
}

/** The log ends of a consumer's topics and its group's committed offsets on them: the horizon's inputs. */
export class ConsumerProgress {
  private admin: Admin | undefined;

  constructor(
    private readonly broker: Broker,
    private readonly topics: string[],
  ) {}

  async now(consumer: Consumer): Promise<ConsumerPosition> {
    const ends: ConsumerPosition['ends'] = new Map();
    const committed: ConsumerPosition['committed'] = new Map();
    try {
      this.admin ??= await this.broker.admin();
      for (const topic of this.topics) {
        for (const p of await this.admin.partitionOffsets(topic)) ends.set(partitionOf(topic, p.partition), p);
        for (const [partition, offset] of await consumer.committedOffsets(topic)) {
          committed.set(partitionOf(topic, partition), offset);
        }
      }
    } catch (error) {
      await this.close();
      throw error;
    }
    return { ends, committed };
  }

  async close(): Promise<void> {
    const admin = this.admin;
    this.admin = undefined;
    await admin?.disconnect().catch(() => {});
  }
}

/**
 * Whether the consumer has consumed everything that was on the broker at `horizon` (the log ends
 * then): on every partition, it has committed past the horizon's end, or there was nothing there.
 */
export function passedHorizon(horizon: Map<string, PartitionOffsets>, now: ConsumerPosition): boolean {
  for (const [partition, { low, high }] of horizon) {
    if (BigInt(high) <= BigInt(low)) continue;
    const committed = now.committed.get(partition);
    if (committed === undefined || BigInt(committed) < BigInt(high)) return false;
  }
  return true;
}

/** When a UUIDv7 was drawn (ms since the epoch); undefined for another version. */
export function uuidv7Time(id: string): number | undefined {
  const hex = id.replaceAll('-', '');
  if (hex.length !== 32 || hex[12] !== '7') return undefined;
  return Number.parseInt(hex.slice(0, 12), 16);
}

interface ParkingOptions {
  consumer: string;
  pool: pg.Pool;
  apply: ApplyEffects;
  deferral: Required<DeferralPolicy>;
  /** Where the consumer stands now (the broker's answer); throws while the broker is away. */
  position: () => Promise<ConsumerPosition>;
  deadLetters: DeadLetters;
  metrics: ConsumerMetrics;
  log: Logger;
}

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

/**
 * An inbox consumer's parked events (`inbox_deferred`): events whose cause has not been handled,
 * with the events of their key queued behind them. Parking is a statement of the batch's
 * transaction; passes over the parked events run after batches and on one timer, apply those
 * whose cause is now handled and back the others off. A cause is given up on (the exhaustion
 * policy) only when the consumer's progress shows it cannot come any more (ADR 22): past the
 * retry floor, the log ends of the consumer's topics are taken as the event's horizon, and once
 * the group has committed past that horizon on every partition with the cause still unknown and
 * not parked itself, everything that was on the broker has been consumed without it.
 */
export class Parking {
  private timer: NodeJS.Timeout | undefined;
  private passRunning: Promise<void> | undefined;
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
  /** When the armed timer fires (see arm). */
  private due = 0;
  private lastSweep = 0;
  private running = false;
  /**
   * The horizon of each parked event past its retry floor (see the class comment). Kept in memory:
   * another instance, or this one after a restart, takes a later horizon, which only waits longer.
   */
  private readonly horizons = new Map<string, Map<string, PartitionOffsets>>();

  constructor(private readonly opts: ParkingOptions) {}

  /** Passes may run from now on; the timer is armed by `arm`, once the consumer runs. */
  start(): void {
    this.running = true;
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.passRunning;
  }

  /** A mark to give `afterBatch`: how many parkings were made so far. */
  mark(): number {
    return this.parkings;
  }

  /** Parks the events, in their order; they count as parked once the transaction commits. */
  statement(events: ReceivedEvent[]): Statement {
    this.parkings++; // afterBatch raises mayHaveParked once this parking is committed
    this.opts.log.debug({ parked: events.map((e) => e.event.event_id) }, 'events parked until their cause is handled');
    return {
      text: `INSERT INTO inbox_deferred
         (consumer, event_id, topic, partition, "offset", partition_key, caused_by, body, headers, next_attempt_at)
       SELECT $1, e, t, p, o, k, c, b, h, now() + make_interval(secs => $10::float8 / 1000)
         FROM unnest($2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::uuid[], $8::text[], $9::jsonb[])
           WITH ORDINALITY AS u(e, t, p, o, k, c, b, h, n)
        ORDER BY n
       ON CONFLICT (consumer, event_id) DO NOTHING`,
      values: [
        this.opts.consumer,
        events.map((e) => e.event.event_id),
        events.map((e) => e.message.topic),
        events.map((e) => e.message.partition),
        events.map((e) => e.message.offset),
        events.map(partitionKey),
        events.map((e) => e.event.caused_by),
        events.map((e) => JSON.stringify(e.event)),
        events.map((e) => JSON.stringify(e.message.headers)),
        this.opts.deferral.initialDelayMs,
      ],
    };
  }

  /** After a batch committed: takes what it (or one beside it) parked since `mark`, then kicks a pass. */
  afterBatch(mark: number): void {
    if (this.parkings !== mark) {
      // Events were parked (here, or by a batch beside this one) and are committed now. A pass
      // that read before the commit did not see them and may have cleared the flag: raise it,
      // and count once more so that such a pass still in flight cannot clear it again; the next
      // pass, now or at the timer, takes them.
      this.mayHaveParked = true;
      this.parkings++;
      this.arm();
    }
    this.kick();
  }

  private kick(sweep = false) {
    if (this.passRunning || !this.running || !(this.mayHaveParked || sweep)) return;
    if (sweep) this.lastSweep = Date.now();
    this.passRunning = this.retry()
      .then(() => {})
      .catch((err) => this.opts.log.warn({ err }, 'retrying parked events failed'))
      .finally(() => {
        this.passRunning = undefined;
        this.arm();
      });
  }

  /**
   * Arms the one timer of the parked-event passes: every `initialDelayMs` while this process may
   * have parked events (their backoff starts there), otherwise only for the next sweep. An idle
   * consumer used to wake every 100 ms to find it had nothing to do; with a dozen consumers in
   * three services that was most of the stack's timer wakeups (ADR 19).
   */
  arm(): void {
    if (!this.running) return;
    const now = Date.now();
    const due = this.mayHaveParked ? now + this.opts.deferral.initialDelayMs : this.lastSweep + DEFERRED_SWEEP_MS;
    if (this.timer !== undefined && this.due <= due) return;
    clearTimeout(this.timer);
    this.due = due;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        if (Date.now() - this.lastSweep >= DEFERRED_SWEEP_MS) this.kick(true);
        else this.kick();
        this.arm();
      },
      Math.max(0, due - now),
    );
    this.timer.unref();
  }

  /**
   * One pass over the parked events in the order they were parked: applies those whose cause is
   * now handled and that have nothing parked before them on their key; backs off the others and,
   * once their cause cannot come any more, applies the exhaustion policy. Answers how many it
   * applied or dropped.
   */
  async retry(): Promise<number> {
    const { consumer, deferral } = this.opts;
    let progressed = 0;
    const parkingsBefore = this.parkings;
    let position: ConsumerPosition | undefined;
    const now = async () => {
      position ??= await withTimeout(
        this.opts.position(),
        POSITION_TIMEOUT_MS,
        `the broker did not say where ${consumer} stands within ${POSITION_TIMEOUT_MS} ms`,
      );
      return position;
    };
    await inTransaction(this.opts.pool, async (tx) => {
      const { rows } = await tx.query<Parked>(
        `SELECT event_id::text, topic, partition, "offset"::text, partition_key, caused_by::text, body, headers,
                attempts, next_attempt_at <= now() AS due
           FROM inbox_deferred WHERE consumer = $1 ORDER BY seq LIMIT 500 FOR UPDATE SKIP LOCKED`,
        [consumer],
      );
      // Events parked since this pass read are not in its rows: they keep the flag up.
      if (this.parkings === parkingsBefore) this.mayHaveParked = rows.length > 0;
      if (rows.length < 500) {
        const parked = new Set(rows.map((r) => r.event_id));
        for (const id of this.horizons.keys()) if (!parked.has(id)) this.horizons.delete(id);
      }
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
        const cause = row.caused_by === null ? 'handled' : await this.causeState(tx, row.caused_by);
        const known = cause === 'handled';
        const exhausted =
          cause === 'missing' &&
          row.due &&
          row.attempts + 1 >= deferral.maxAttempts &&
          (await this.cannotCome(row.event_id, now));
        // A cause older than what parking remembers may have been handled and pruned: applied.
        const forgotten =
          exhausted && (uuidv7Time(row.caused_by ?? '') ?? Date.now()) < Date.now() - deferral.causeRetentionMs;
        if (known || (exhausted && (deferral.onExhausted === 'apply' || forgotten))) {
          if (!known) {
            this.opts.log.warn(
              { eventId: row.event_id, causedBy: row.caused_by, forgotten },
              'applying a parked event without its cause',
            );
          }
          await tx.query('SAVEPOINT parked');
          try {
            const fresh = await recordEvents(tx, consumer, [item], 'applied');
            const last = fresh.length > 0 ? ((await this.opts.apply(tx, [item])) ?? []) : [];
            await queryTogether(tx, [
              ...last,
              {
                text: 'DELETE FROM inbox_deferred WHERE consumer = $1 AND event_id = $2',
                values: [consumer, row.event_id],
              },
              { text: 'RELEASE SAVEPOINT parked' },
            ]);
            this.horizons.delete(row.event_id);
            this.opts.metrics.count('applied', fresh.length);
            progressed++;
            continue;
          } catch (error) {
            await tx.query('ROLLBACK TO SAVEPOINT parked');
            if (isInfrastructureError(error)) throw error;
            this.opts.log.warn({ err: error, eventId: row.event_id }, 'parked event failed');
            if (row.attempts + 1 >= deferral.maxAttempts) {
              await this.drop(tx, item, error as Error);
              progressed++;
              continue;
            }
          }
        } else if (exhausted) {
          await this.drop(
            tx,
            item,
            new Error(`cause ${row.caused_by} never arrived: ${consumer} consumed past where it could have been`),
            'CauseMissing',
          );
          progressed++;
          continue;
        }
        blocked.add(key);
        if (row.due) {
          await tx.query(
            `UPDATE inbox_deferred SET attempts = attempts + 1,
                    next_attempt_at = now() + make_interval(secs =>
                      least($3::float8 * power(2, least(attempts + 1, 30)), $4::float8) / 1000)
              WHERE consumer = $1 AND event_id = $2`,
            [consumer, row.event_id, deferral.initialDelayMs, PARKED_RETRY_MAX_MS],
          );
        }
      }
    });
    if (progressed > 0) this.kick();
    return progressed;
  }

  /** Whether a cause is handled (in the inbox or this service's outbox), parked itself, or missing. */
  private async causeState(tx: pg.PoolClient, cause: string): Promise<'handled' | 'parked' | 'missing'> {
    const { rows } = await tx.query<{ state: 'handled' | 'parked' }>(
      `SELECT 'handled' AS state FROM inbox WHERE consumer = $1 AND event_id = $2::uuid
       UNION ALL SELECT 'handled' FROM outbox WHERE event_id = $2::uuid
       UNION ALL SELECT 'parked' FROM inbox_deferred WHERE consumer = $1 AND event_id = $2::uuid
       LIMIT 1`,
      [this.opts.consumer, cause],
    );
    return rows[0]?.state ?? 'missing';
  }

  /**
   * Whether the cause of a parked event past its retry floor cannot come any more: the first
   * time, takes the horizon and answers no; then, whether the consumer has passed it.
   */
  private async cannotCome(eventId: string, now: () => Promise<ConsumerPosition>): Promise<boolean> {
    const horizon = this.horizons.get(eventId);
    if (!horizon) {
      this.horizons.set(eventId, new Map((await now()).ends));
      return false;
    }
    return passedHorizon(horizon, await now());
  }

  /** Gives up on a parked event: off the parking, into the DLQ, into the inbox as dead-lettered. */
  private async drop(tx: pg.PoolClient, item: ReceivedEvent, error: Error, type = error.name) {
    this.horizons.delete(item.event.event_id);
    await tx.query('DELETE FROM inbox_deferred WHERE consumer = $1 AND event_id = $2', [
      this.opts.consumer,
      item.event.event_id,
    ]);
    await this.opts.deadLetters.send({ ...item.message, value: JSON.stringify(item.event) }, error, type);
    await recordEvents(tx, this.opts.consumer, [item], 'dead_lettered');
    this.opts.metrics.count('dead_lettered');
  }
}
