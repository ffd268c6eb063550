import type { KeyObject } from 'node:crypto';
import {
  type Broker,
  backoffDelay,
  cloudEventHeaders,
  encodeEvent,
  HEARTBEAT_KEY,
  inTransaction,
  newEvent,
  type Producer,
  type PublicSigningKey,
  physicalTopic,
  signIdentityPayload,
} from '@onto/shared';
import type { FastifyBaseLogger } from 'fastify';
import type pg from 'pg';

export interface IdentityHeartbeatOptions {
  pool: pg.Pool;
  broker: Broker;
  topicPrefix: string;
  logger: FastifyBaseLogger;
  intervalMs?: number;
  /** Signs every heartbeat (ADR 35). */
  identityKey: KeyObject;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Publishes `identity.heartbeat` straight to onto.identity (not through the outbox) every
 * `intervalMs`, carrying the watermark W = min(transaction start, creation time of the oldest
 * identity event still pending in the outbox), both read in one PostgreSQL statement; the
 * transaction starts before the statement's snapshot is taken, so a commit W does not see is
 * later than W. Every identity event that
 * committed before W is out of the pending set, so the broker acknowledged it before this
 * heartbeat was sent: on the topic's single partition it precedes the heartbeat. A replica that
 * has applied the heartbeat has applied every revocation committed before W.
 */
export class IdentityHeartbeat {
  readonly topic: string;
  private readonly intervalMs: number;
  private producer: Producer | undefined;
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private running = false;
  private failures = 0;
  private checkedPartitions = false;
  private seq = 0;

  constructor(private readonly opts: IdentityHeartbeatOptions) {
    this.topic = physicalTopic(opts.topicPrefix, 'onto.identity');
    this.intervalMs = opts.intervalMs ?? 500;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    // A broker that never answers can hold a connect for many seconds; it is dropped when it ends.
    await Promise.race([this.beating, sleep(300)]);
    const producer = this.producer;
    this.producer = undefined;
    await producer?.disconnect().catch(() => {});
  }

  private schedule(delayMs: number) {
    this.timer = setTimeout(() => {
      const started = Date.now();
      this.beating = this.beat().finally(() => {
        this.beating = undefined;
        if (!this.running) return;
        const next =
          this.failures > 0
            ? backoffDelay(this.failures, { initialMs: this.intervalMs, maxMs: 5000 })
            : this.intervalMs;
        this.schedule(Math.max(0, next - (Date.now() - started)));
      });
    }, delayMs);
    this.timer.unref();
  }

  /** Publishes one heartbeat; failures are logged and retried with backoff, never thrown. */
  async beat(): Promise<void> {
    try {
      const producer = await this.connect();
      // An identity event's outbox row is stamped with its transaction's start. A transaction still
      // in flight may yet commit one stamped before now, so the watermark stops at the start of the
      // oldest one, read before the outbox is (the second statement's snapshot then sees every
      // row of a transaction that ended in between).
      const { rows } = await inTransaction(this.opts.pool, async (tx) => {
        const inFlight = await tx.query<{ started: Date | null }>(
          `SELECT min(xact_start) AS started FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`,
        );
        return tx.query<{ watermark: number; keys: PublicSigningKey[] }>(
          `SELECT floor(extract(epoch FROM least(transaction_timestamp(), $2::timestamptz,
                    (SELECT min(o.created_at) FROM outbox_pending p JOIN outbox o ON o.id = p.id WHERE o.topic = $1)
                  )) * 1000)::int8 AS watermark,
                  -- Retired keys still verifying carry when they stop (ADR 42).
                  (SELECT coalesce(json_agg(public_jwk || CASE WHEN refused_after IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('refusedAfter', floor(extract(epoch FROM refused_after) * 1000)::int8) END
                            ORDER BY created_at), '[]')
                     FROM signing_keys WHERE refused_after IS NULL OR refused_after > now()) AS keys`,
          [this.topic, inFlight.rows[0]?.started ?? null],
        );
      });
      const row = rows[0];
      if (!row) throw new Error('the watermark query returned no row');
      const event = newEvent({
        type: 'identity.heartbeat',
        worldId: '*',
        key: HEARTBEAT_KEY,
        version: 0,
        producer: 'control',
        producerSeq: this.seq++,
        payload: signIdentityPayload(this.opts.identityKey, { watermark: row.watermark, keys: row.keys }),
      });
      const value = encodeEvent(event);
      const headers = { 'onto-event-id': event.event_id, ...cloudEventHeaders(event.event_id, value) };
      await producer.send([{ topic: this.topic, messages: [{ key: HEARTBEAT_KEY, value, headers }] }]);
      if (this.failures > 0) this.opts.logger.info({ failures: this.failures }, 'identity heartbeats resumed');
      this.failures = 0;
      await this.checkPartitions();
    } catch (err) {
      this.failures++;
      if (this.failures === 1 || this.failures % 20 === 0) {
        this.opts.logger.warn({ err, failures: this.failures }, 'identity heartbeat failed; replicas will fail closed');
      }
      const producer = this.producer;
      this.producer = undefined;
      await producer?.disconnect().catch(() => {});
    }
  }

  private async connect(): Promise<Producer> {
    if (this.producer) return this.producer;
    const producer = await this.opts.broker.producer();
    if (!this.running) {
      await producer.disconnect().catch(() => {});
      throw new Error('identity heartbeat stopped');
    }
    this.producer = producer;
    return producer;
  }

  /** The watermark's argument needs one partition; say so loudly when the topic has more. */
  private async checkPartitions() {
    if (this.checkedPartitions) return;
    this.checkedPartitions = true;
    try {
      const admin = await this.opts.broker.admin();
      const partitions = await admin.partitionOffsets(this.topic).finally(() => admin.disconnect().catch(() => {}));
      if (partitions.length !== 1) {
        this.opts.logger.error(
          { topic: this.topic, partitions: partitions.length },
          'onto.identity must have exactly one partition: heartbeats may overtake revocations on the others',
        );
      }
    } catch (err) {
      this.opts.logger.warn({ err }, 'could not count the partitions of onto.identity');
    }
  }
}
