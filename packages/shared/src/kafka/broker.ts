/**
 * The broker as onto sees it: a producer, a consumer group and an admin. Everything else in
 * the code base talks to these interfaces; only kafkajs-broker.ts knows the Kafka client, so
 * that changing the client touches one module.
 */

export type Headers = Record<string, string>;

export interface OutgoingMessage {
  key: string;
  value: string | Buffer;
  headers?: Headers;
}

export interface Delivery {
  topic: string;
  partition: number;
  /** The offset of the first record of this topic-partition in the request. */
  baseOffset: string;
}

/**
 * The broker refused records for good: sending them again fails again (a record larger than the
 * topic accepts, an invalid record, a topic this client may not write). `reason` is the broker's.
 */
export class RecordsRefusedError extends Error {
  override readonly name = 'RecordsRefusedError';
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

export interface Producer {
  /**
   * Publishes to one or more topics in one request, idempotently with acks=all; resolves only
   * once the broker has acknowledged every record, rejects otherwise: with RecordsRefusedError
   * when the broker refused some for good. A send that failed may still have written some records
   * (a duplicate when they are sent again).
   */
  send(batches: { topic: string; messages: OutgoingMessage[] }[]): Promise<Delivery[]>;
  disconnect(): Promise<void>;
}

export interface IncomingMessage {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  value: Buffer | null;
  headers: Headers;
  timestamp: string;
}

export interface IncomingBatch {
  topic: string;
  partition: number;
  messages: IncomingMessage[];
  /** Keep group membership alive during long work. */
  heartbeat(): Promise<void>;
  /**
   * Records that everything up to and including this message is done. The broker learns it
   * shortly after, in the background, with other partitions' offsets in one request; a crash
   * before then redelivers from the previous commit.
   */
  commit(message: IncomingMessage): Promise<void>;
  isRunning(): boolean;
  isStale(): boolean;
}

export interface ConsumerOptions {
  groupId: string;
  topics: (string | RegExp)[];
  fromBeginning?: boolean;
  /**
   * Where each of these partitions starts, whatever the group committed: for readers that keep no
   * progress of their own, such as the live event hub (Admin.offsetsAt finds them).
   */
  startAt?: { topic: string; partition: number; offset: string }[];
  sessionTimeoutMs?: number;
  /** How long a rebalance waits for members to rejoin (a crashed member never does). */
  rebalanceTimeoutMs?: number;
  maxBytesPerPartition?: number;
  /** Longest a fetch waits for data; also how long stopping can take. */
  maxWaitTimeMs?: number;
  /** How many partitions' batches to process at once. */
  partitionsConsumedConcurrently?: number;
}

export interface Consumer {
  /**
   * Starts consuming; `handle` gets each batch in partition order, one batch of a partition at a
   * time, at most `partitionsConsumedConcurrently` batches at once, while the next batches are
   * fetched. Offsets are committed only through `batch.commit` or, when `handle` resolves, for the
   * whole batch. When `handle` throws, the partition is consumed again from its first record not
   * committed.
   */
  run(handle: (batch: IncomingBatch) => Promise<void>): Promise<void>;
  stop(): Promise<void>;
  disconnect(): Promise<void>;
  /** Offsets committed by this group, by topic then partition. */
  committedOffsets(topic: string): Promise<Map<number, string>>;
}

export interface TopicSpec {
  name: string;
  partitions: number;
  /** Copies of each partition; the cluster's default (3 on three brokers, 1 on one) unless said. */
  replicationFactor?: number;
  config?: Record<string, string>;
}

export interface PartitionReplicas {
  partition: number;
  leader: number;
  replicas: number[];
  isr: number[];
}

export interface PartitionOffsets {
  partition: number;
  low: string;
  high: string;
}

export interface Admin {
  /** Succeeds once a metadata request has been answered. */
  ping(): Promise<void>;
  /** Brokers registered with the cluster now. */
  brokerCount(): Promise<number>;
  /** Each partition's leader, replicas and in-sync replicas (broker ids), by partition. */
  partitionReplicas(topic: string): Promise<PartitionReplicas[]>;
  ensureTopics(specs: TopicSpec[]): Promise<string[]>;
  deleteTopics(names: string[]): Promise<void>;
  listTopics(): Promise<string[]>;
  partitionOffsets(topic: string): Promise<PartitionOffsets[]>;
  /** Per partition, the offset of the first record written at or after `timestamp` (ms), else the end. */
  offsetsAt(topic: string, timestamp: number): Promise<{ partition: number; offset: string }[]>;
  consumerLag(groupId: string, topic: string): Promise<number>;
  /** Adds allow rules (a rule already there is kept); needs a super user (docs/adr/0024). */
  createAcls(rules: readonly AclRule[]): Promise<void>;
  /** The largest record batch each topic accepts (`max.message.bytes`, the broker's when not set). */
  maxMessageBytes(topics: string[]): Promise<Map<string, number>>;
  /** Sets topic configuration entries (e.g. `max.message.bytes`); the others stay as they are. */
  alterTopicConfig(topic: string, config: Record<string, string>): Promise<void>;
  disconnect(): Promise<void>;
}

export interface Broker {
  producer(): Promise<Producer>;
  consumer(options: ConsumerOptions): Promise<Consumer>;
  admin(): Promise<Admin>;
}

/** One ACL of the broker (events/acls.ts derives them from the event catalogue). */
export interface AclRule {
  principal: string;
  resourceType: 'Topic' | 'Group';
  patternType: 'Literal' | 'Prefixed';
  name: string;
  operation: 'Read' | 'Write' | 'DescribeConfigs';
}
