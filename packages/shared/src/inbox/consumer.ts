import type pg from 'pg';
import type { Logger } from 'pino';
import { backoffDelay } from '../backoff.js';
import { inTransactionTogether, type Statement, type TransactionOutcome } from '../db/pipeline.js';
import { inTransaction } from '../db/transaction.js';
import { type EventEnvelope, parseEvent } from '../events/envelope.js';
import { isInfrastructureError, untilSettled } from '../infrastructure-errors.js';
import type { Consumer, IncomingBatch, IncomingMessage } from '../kafka/broker.js';
import { applyTraced } from '../tracing/context.js';
import { BatchMerger } from './batch-merging.js';
import { DeadLetters } from './dead-letters.js';
import { ConsumerMetrics } from './metrics.js';
import type { DeferralPolicy, InboxConsumerOptions, ReceivedEvent } from './options.js';
import { ConsumerProgress, Parking } from './parking.js';
import { ProcessedCache } from './processed-cache.js';
import {
  pruneInbox,
  type Recorded,
  recordEvents,
  recordStatement,
  sortRecorded,
  unrecordStatement,
} from './statements.js';

export { isInfrastructureError } from '../infrastructure-errors.js';
export type * from './options.js';
export { pruneInbox, uuidv7Floor } from './statements.js';

/** A batch held a duplicate or an event to park: its prepared statements must not count. */
class LostBet extends Error {
  override readonly name = 'LostBet';
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * At-least-once from Kafka, exactly-once in effect. Per batch: Redis says which events are
 * certainly done; the rest go through one PostgreSQL transaction that records each event in the
 * inbox (a duplicate is skipped) and applies the effects; offsets are committed afterwards.
 * An event whose cause has not been handled is parked, with the events of its key queued
 * behind it, without holding up the partition. An event that keeps failing goes to the DLQ.
 */
export class InboxConsumer {
  private consumer: Consumer | undefined;
  /** Where the group is on its topics, for parking's horizon. */
  private readonly progress: ConsumerProgress;
  private readonly cache: ProcessedCache;
  private readonly log: Logger;
  private readonly maxAttempts: number;
  private readonly retryDelayMs: number;
  private readonly metrics: ConsumerMetrics;
  private readonly deadLetters: DeadLetters;
  private readonly parking: Parking;
  private readonly merger: BatchMerger | undefined;
  /** Whether to send the effects' prepared statements with the inbox statement (see PrepareEffects). */
  private speculate = true;

  constructor(private readonly opts: InboxConsumerOptions) {
    this.log = opts.logger.child({ component: 'inbox-consumer', consumer: opts.name });
    this.maxAttempts = opts.maxAttempts ?? 5;
    this.retryDelayMs = opts.retryDelayMs ?? 50;
    const deferral: Required<DeferralPolicy> = {
      initialDelayMs: 100,
      maxAttempts: 8,
      onExhausted: 'dead-letter',
      causeRetentionMs: Math.min(24 * 3600_000, opts.retentionMs ?? 7 * 24 * 3600_000),
      ...opts.deferral,
    };
    this.metrics = new ConsumerMetrics(opts.name, opts.registry, opts.pool);
    this.progress = new ConsumerProgress(opts.broker, opts.topics);
    this.deadLetters = new DeadLetters(opts.broker, opts.name);
    this.parking = new Parking({
      consumer: opts.name,
      pool: opts.pool,
      apply: opts.apply,
      deferral,
      position: () => {
        if (!this.consumer) throw new Error('consumer is not started');
        return this.progress.now(this.consumer);
      },
      deadLetters: this.deadLetters,
      metrics: this.metrics,
      log: this.log,
    });
    if (opts.mergeBatches) this.merger = new BatchMerger((events) => this.process(events), opts.mergeKey, this.log);
    this.cache = new ProcessedCache(opts.redis, opts.name, opts.redisTtlSeconds ?? 7 * 24 * 3600, (err) => {
      this.metrics.redisFallback();
      this.log.debug({ err }, 'redis unavailable; using the PostgreSQL inbox alone');
    });
  }

  async start(): Promise<void> {
    this.parking.start();
    await this.cache.bind(this.opts.pool);
    await this.deadLetters.start();
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
    this.parking.arm();
  }

  /** How often `prune` is meant to run: the service runs it as a recurring job (consumersPlugin). */
  get pruneIntervalMs(): number {
    return this.opts.pruneIntervalMs ?? 600_000;
  }

  /** Prunes this consumer's inbox rows older than the retention (see pruneInbox). */
  async prune(): Promise<number> {
    const n = await pruneInbox(this.opts.pool, this.opts.name, this.opts.retentionMs ?? 7 * 24 * 3600_000);
    if (n > 0) this.log.info({ pruned: n }, 'inbox rows past retention pruned');
    return n;
  }

  async stop(): Promise<void> {
    await this.parking.stop();
    await this.consumer?.disconnect();
    await this.progress.close();
    await this.deadLetters.stop();
    await this.cache.flush();
    this.consumer = undefined;
  }

  /** One pass over the parked events (see Parking.retry); answers how many it applied or dropped. */
  retryDeferred(): Promise<number> {
    return this.parking.retry();
  }

  /** Handles one batch of one partition; public so that tests can drive it directly. */
  async handleBatch(batch: IncomingBatch): Promise<void> {
    const passThrough = this.opts.passThrough;
    if (!passThrough) return this.handleInbox(batch);
    const taken: EventEnvelope[] = [];
    const rest: IncomingMessage[] = [];
    for (const message of batch.messages) {
      const kept = passThrough.take(message);
      if (kept) taken.push(kept);
      else rest.push(message);
    }
    if (rest.length > 0) await this.handleInbox({ ...batch, messages: rest });
    if (batch.isRunning()) await passThrough.afterBatch(taken);
  }

  private async handleInbox(batch: IncomingBatch): Promise<void> {
    const mark = this.parking.mark();
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
    this.metrics.duplicate('redis', done.size);
    const todo = done.size > 0 ? valid.filter((d) => !done.has(d.event.event_id)) : valid;

    if (todo.length > 0) {
      await untilSettled(batch, this.log, async () => {
        try {
          const handled = this.merger ? await this.merger.run(todo) : await this.process(todo);
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
      await untilSettled(batch, this.log, () => this.deadLetter(bad.message, bad.error, null));
    }
    const last = batch.messages.at(-1);
    if (last && batch.isRunning() && !batch.isStale()) await batch.commit(last);
    this.parking.afterBatch(mark);
  }

  private async oneByOne(batch: IncomingBatch, events: ReceivedEvent[]): Promise<void> {
    for (const item of events) {
      for (let attempt = 1; ; attempt++) {
        try {
          await untilSettled(batch, this.log, async () => {
            const ids = await this.process([item]);
            this.cache.markDone(ids);
          });
          break;
        } catch (error) {
          if (attempt >= this.maxAttempts) {
            await untilSettled(batch, this.log, () => this.deadLetter(item.message, error as Error, item.event));
            break;
          }
          this.log.warn({ err: error, eventId: item.event.event_id, attempt }, 'event failed; retrying');
          await sleep(backoffDelay(attempt - 1, { initialMs: this.retryDelayMs, maxMs: 5000 }));
        }
      }
      if (batch.isRunning() && !batch.isStale()) await batch.commit(item.message as IncomingMessage);
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
        [recordStatement(this.opts.name, events), ...ahead],
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

  private async applyRecorded(
    tx: pg.PoolClient,
    events: ReceivedEvent[],
    recorded: Recorded,
    prepared: readonly pg.QueryResult<Record<string, unknown>>[] | undefined,
  ): Promise<TransactionOutcome<string[]>> {
    const { fresh, toPark, taken, duplicates } = sortRecorded(events, recorded);
    // The prepared statements bet on every event being fresh; lost, they are rolled back.
    // Betting stops after a loss until a batch comes whose events all are.
    if (fresh.length === events.length) this.speculate = true;
    else if (prepared) {
      this.speculate = false;
      throw new LostBet();
    }
    const last: Statement[] = [];
    if (taken.length > 0) last.push(unrecordStatement(this.opts.name, taken));
    if (fresh.length > 0) {
      const apply = () => this.opts.apply(tx, fresh, prepared);
      last.push(...((await applyTraced(this.opts.tracer, this.opts.name, fresh, apply)) ?? []));
    }
    if (toPark.length > 0) last.push(this.parking.statement(toPark));
    await this.opts.faults?.beforeCommit?.(fresh);
    this.metrics.duplicate('postgres', duplicates);
    this.metrics.count('applied', fresh.length);
    this.metrics.count('parked', toPark.length);
    const parkedIds = new Set(toPark.map((e) => e.event.event_id));
    const value = events.map((e) => e.event.event_id);
    return { value: parkedIds.size > 0 ? value.filter((id) => !parkedIds.has(id)) : value, last };
  }

  private async deadLetter(
    message: IncomingMessage | ReceivedEvent['message'],
    error: Error,
    event: EventEnvelope | null,
  ) {
    const value = 'value' in message && message.value ? message.value : event ? JSON.stringify(event) : '';
    const { topic, partition, offset, headers } = message; // read, not spread: headers is a getter
    await this.deadLetters.send({ topic, partition, offset, key: message.key ?? null, headers, value }, error);
    if (event) {
      // Recorded so that a redelivery is a duplicate rather than a second dead letter.
      const item = { event, message: { ...message, key: message.key ?? null } };
      await inTransaction(this.opts.pool, (tx) => recordEvents(tx, this.opts.name, [item], 'dead_lettered'));
      this.cache.markDone([event.event_id]);
    }
    this.metrics.count('dead_lettered');
    this.log.error({ err: error, topic: message.topic, offset: message.offset }, 'event dead-lettered');
  }
}
