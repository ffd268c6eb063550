import { randomUUID } from 'node:crypto';
import type { KafkaSasl } from '@onto/shared';
import { type Admin, Kafka, logLevel, type Producer, type SASLOptions } from 'kafkajs';
import { AdminError, EXIT } from './errors.js';

/** A record as read, bytes kept as they were. */
export interface KafkaRecord {
  topic: string;
  partition: number;
  offset: bigint;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
  timestamp: string;
}

/** Offsets [from, to) of one partition. */
export interface PartitionRange {
  partition: number;
  from: bigint;
  to: bigint;
}

export interface PartitionLog {
  partition: number;
  /** The first offset still held. */
  low: bigint;
  /** One past the last record. */
  high: bigint;
}

/** The Kafka side of onto-admin: reading ranges, re-publishing records, deleting a DLQ's head. */
export class KafkaTools {
  private readonly kafka: Kafka;
  private admin: Admin | undefined;
  private producer: Producer | undefined;

  /** `sasl`: the Kafka user to log in as (KAFKA_SASL_*), as the services do; anonymous without. */
  constructor(brokers: string, sasl?: KafkaSasl) {
    this.kafka = new Kafka({
      brokers: brokers.split(',').map((b) => b.trim()),
      clientId: 'onto-admin',
      logLevel: logLevel.NOTHING,
      retry: { retries: 3 },
      // kafkajs's SASLOptions is a union per mechanism; each of ours has exactly these three fields.
      ...(sasl ? { sasl: { ...sasl } as SASLOptions } : {}),
    });
  }

  private async connectedAdmin(): Promise<Admin> {
    if (!this.admin) {
      const admin = this.kafka.admin();
      try {
        await admin.connect();
      } catch (error) {
        throw new AdminError(`Kafka could not be reached: ${(error as Error).message}`, EXIT.failure);
      }
      this.admin = admin;
    }
    return this.admin;
  }

  async exists(topic: string): Promise<boolean> {
    return (await (await this.connectedAdmin()).listTopics()).includes(topic);
  }

  /** Each partition's first and next offsets; 3 (not found) when the topic does not exist. */
  async log(topic: string): Promise<PartitionLog[]> {
    if (!(await this.exists(topic))) throw new AdminError(`topic ${topic} does not exist`, EXIT.notFound);
    const offsets = await (await this.connectedAdmin()).fetchTopicOffsets(topic);
    return offsets
      .map((p) => ({ partition: p.partition, low: BigInt(p.low), high: BigInt(p.high) }))
      .sort((a, b) => a.partition - b.partition);
  }

  /**
   * Every record of `ranges` in offset order per partition, read by a consumer group of its own
   * that commits nothing and is deleted afterwards.
   */
  async read(topic: string, ranges: PartitionRange[], onRecord?: (r: KafkaRecord) => void): Promise<KafkaRecord[]> {
    const wanted = ranges.filter((r) => r.to > r.from);
    if (wanted.length === 0) return [];
    const records: KafkaRecord[] = [];
    const groupId = `onto-admin-${randomUUID()}`;
    const consumer = this.kafka.consumer({ groupId, maxWaitTimeInMs: 100, allowAutoTopicCreation: false });
    const pending = new Map(wanted.map((r) => [r.partition, r]));
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await new Promise<void>((resolve, reject) => {
        consumer.on(consumer.events.CRASH, (e) => reject(e.payload.error));
        consumer
          .run({
            autoCommit: false,
            eachBatch: async ({ batch }) => {
              const range = pending.get(batch.partition);
              if (!range) return;
              for (const m of batch.messages) {
                const offset = BigInt(m.offset);
                if (offset < range.from || offset >= range.to) continue;
                const record: KafkaRecord = {
                  topic,
                  partition: batch.partition,
                  offset,
                  key: m.key,
                  value: m.value,
                  headers: Object.fromEntries(
                    Object.entries(m.headers ?? {}).flatMap(([k, v]) =>
                      v === undefined ? [] : [[k, Array.isArray(v) ? String(v[0]) : String(v)]],
                    ),
                  ),
                  timestamp: m.timestamp,
                };
                records.push(record);
                onRecord?.(record);
              }
              if (BigInt(batch.lastOffset()) + 1n >= range.to) {
                pending.delete(batch.partition);
                if (pending.size === 0) resolve();
              }
            },
          })
          .then(() => {
            for (const r of wanted) consumer.seek({ topic, partition: r.partition, offset: String(r.from) });
          }, reject);
      });
    } finally {
      await consumer.disconnect().catch(() => {});
      await (await this.connectedAdmin()).deleteGroups([groupId]).catch(() => {});
    }
    return records.sort((a, b) => a.partition - b.partition || Number(a.offset - b.offset));
  }

  /** Publishes records (key, value, headers) to a topic and partition, acknowledged by every replica. */
  async publish(
    messages: {
      topic: string;
      partition: number;
      key: Buffer | null;
      value: Buffer | null;
      headers: Record<string, string>;
    }[],
  ): Promise<void> {
    if (!this.producer) {
      this.producer = this.kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
      await this.producer.connect();
    }
    const byTopic = new Map<string, typeof messages>();
    for (const m of messages) byTopic.set(m.topic, [...(byTopic.get(m.topic) ?? []), m]);
    for (const [topic, batch] of byTopic) {
      await this.producer.send({
        topic,
        acks: -1,
        messages: batch.map((m) => ({ partition: m.partition, key: m.key, value: m.value, headers: m.headers })),
      });
    }
  }

  /** Deletes every record of each partition before `before` (the DLQ's redriven head). */
  async deleteBefore(topic: string, before: { partition: number; offset: bigint }[]): Promise<void> {
    if (before.length === 0) return;
    await (await this.connectedAdmin()).deleteTopicRecords({
      topic,
      partitions: before.map((b) => ({ partition: b.partition, offset: String(b.offset) })),
    });
  }

  async close(): Promise<void> {
    await this.producer?.disconnect().catch(() => {});
    await this.admin?.disconnect().catch(() => {});
  }
}
