import type { Tracer } from '@opentelemetry/api';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Statement } from '../db/pipeline.js';
import type { EventEnvelope } from '../events/envelope.js';
import type { Broker, IncomingMessage } from '../kafka/broker.js';

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
  /** First retry of a parked event; each further one doubles (up to 5 s). */
  initialDelayMs?: number;
  /**
   * Retries before the consumer's progress is asked whether the cause can still come: a floor,
   * not a bound. The cause is given up on only once the consumer has also consumed, on every
   * partition of its topics, everything that was on the broker when that floor was reached
   * (ADR 22); a backlog in front of the cause only makes the event wait longer.
   */
  maxAttempts?: number;
  /**
   * When the cause cannot come any more: `dead-letter` sends the event to `<topic>.dlq` and lets
   * the events queued behind it go on; `apply` applies it without its cause.
   */
  onExhausted?: 'dead-letter' | 'apply';
  /**
   * How long a handled cause is remembered where parking looks for it (the outbox's retention,
   * 24 h by default, when shorter than the inbox's). A missing cause older than this may have
   * been handled and pruned: it is applied, not dead-lettered, once the consumer has passed it.
   */
  causeRetentionMs?: number;
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
  /** A span per record applied, continuing the record's trace (docs/adr/0055); none without. */
  tracer?: Tracer;
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
  /**
   * How often inbox rows older than the retention are pruned (default every 10 minutes), by the
   * recurring job consumersPlugin defines; a consumer built by hand is pruned by its owner.
   */
  pruneIntervalMs?: number;
  faults?: ConsumerFaults;
  /** Records that bypass the inbox (see PassThrough). */
  passThrough?: PassThrough;
}

/**
 * Records the inbox does not take (identity's heartbeats: idempotent and two a second, they would
 * flood it). `take` picks them out of each batch; once the batch's other events are committed,
 * `afterBatch` gets them (maybe none), so that what they say holds only after everything before
 * them in the partition has been applied.
 */
export interface PassThrough {
  take(message: IncomingMessage): EventEnvelope | undefined;
  afterBatch(taken: EventEnvelope[]): Promise<void>;
}
