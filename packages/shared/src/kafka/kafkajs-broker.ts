import { setTimeout as sleep } from 'node:timers/promises';
import kafkajs, {
  CompressionTypes,
  type ConfigResourceTypes,
  type ConfigSource,
  type ICustomPartitioner,
  Kafka,
  type Admin as KafkaAdmin,
  type Producer as KafkaProducer,
  type logCreator,
  logLevel,
  Partitioners,
  type SASLOptions,
} from 'kafkajs';
import type { Logger } from 'pino';
import { retryWithBackoff } from '../backoff.js';
import {
  type Admin,
  type Broker,
  type Consumer,
  type ConsumerOptions,
  type Headers,
  type IncomingMessage,
  type Producer,
  RecordsRefusedError,
} from './broker.js';
import { partitionOfKey } from './murmur2.js';

export interface KafkaBrokerOptions {
  brokers: string[];
  clientId: string;
  logger: Logger;
  /** How long to keep retrying a request before giving up (connect, metadata, produce). */
  requestTimeoutMs?: number;
  connectionTimeoutMs?: number;
  retries?: number;
  /** SASL credentials (SASL_PLAINTEXT); without them the client connects anonymously. */
  sasl?: KafkaSasl | undefined;
}

export const SASL_MECHANISMS = ['scram-sha-512', 'scram-sha-256', 'plain'] as const;
export interface KafkaSasl {
  mechanism: (typeof SASL_MECHANISMS)[number];
  username: string;
  password: string;
}

/** First wait before a consumer that crashed for good in kafkajs is started again; then doubling. */
const REVIVAL_FIRST_MS = 500;
const REVIVAL_MAX_MS = 10_000;

function pinoLogCreator(logger: Logger): logCreator {
  const child = logger.child({ component: 'kafkajs' });
  return () =>
    ({ level, log }) => {
      const { message, ...extra } = log;
      if (level === logLevel.ERROR) child.error(extra, message);
      else if (level === logLevel.WARN) child.warn(extra, message);
      else if (level === logLevel.INFO) child.debug(extra, message);
    };
}

/**
 * kafkajs's default partitioner for a keyed record (murmur2 of the key, as the Java client), with
 * murmur2 on 32-bit integers (./murmur2.ts): the same partition for the same key. Records without
 * a key, or with a partition of their own, go to kafkajs's.
 */
const keyPartitioner: ICustomPartitioner = () => {
  const fallback = Partitioners.DefaultPartitioner();
  return (args) => {
    const { message, partitionMetadata } = args;
    if (message.partition !== undefined && message.partition !== null) return message.partition;
    const { key } = message;
    if (typeof key === 'string' || Buffer.isBuffer(key)) return partitionOfKey(key, partitionMetadata.length);
    return fallback(args);
  };
};

// kafkajs's ConfigResourceTypes.TOPIC and ConfigSource.TOPIC_CONFIG: its enums are not named
// exports Node finds in its CommonJS module, only its types are.
const TOPIC_RESOURCE = 2 as ConfigResourceTypes;
const SET_ON_TOPIC = 1 as ConfigSource;
const BROKER_RESOURCE = 4 as ConfigResourceTypes;

/**
 * Produce errors that the same records meet again however often they are sent: the relay sets
 * such records aside rather than retry them (RecordsRefusedError).
 */
const REFUSED_FOR_GOOD = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
  'INVALID_RECORD',
  'TOPIC_AUTHORIZATION_FAILED',
  'INVALID_TOPIC_EXCEPTION',
]);

/** The broker's error type (e.g. MESSAGE_TOO_LARGE) behind a kafkajs error and its causes. */
function protocolErrorType(error: unknown): string | undefined {
  for (let e = error as { type?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (typeof e.type === 'string') return e.type;
    e = e.cause as typeof e;
  }
  return undefined;
}

/** The one module that knows kafkajs. */
export function createKafkaBroker(options: KafkaBrokerOptions): Broker {
  const kafka = new Kafka({
    clientId: options.clientId,
    brokers: options.brokers,
    connectionTimeout: options.connectionTimeoutMs ?? 3000,
    requestTimeout: options.requestTimeoutMs ?? 30_000,
    retry: { retries: options.retries ?? 5, initialRetryTime: 100, maxRetryTime: 2000 },
    logLevel: logLevel.WARN,
    logCreator: pinoLogCreator(options.logger),
    // kafkajs's SASLOptions is a union per mechanism; each of ours has exactly these three fields.
    ...(options.sasl ? { sasl: { ...options.sasl } as SASLOptions } : {}),
  });

  return {
    async producer(): Promise<Producer> {
      const make = async () => {
        const producer = kafka.producer({
          idempotent: true,
          maxInFlightRequests: 1,
          allowAutoTopicCreation: false,
          createPartitioner: keyPartitioner,
        });
        await producer.connect();
        return producer;
      };
      let current: Promise<KafkaProducer> | undefined = make();
      await current;
      let closed = false;
      // One send at a time: an idempotent producer's sequence numbers are only right when no send
      // of it starts while another may still take its numbers back (docs/adr/0063). The relay
      // gives each of its loops a producer of its own, so this never waits there.
      let turn: Promise<unknown> = Promise.resolve();
      const send: Producer['send'] = async (batches) => {
        if (closed) throw new Error('the producer is disconnected');
        current ??= make();
        const producer = current;
        try {
          const results = await (await producer).sendBatch({
            acks: -1,
            compression: CompressionTypes.None,
            topicMessages: batches.map((b) => ({
              topic: b.topic,
              messages: b.messages,
            })),
          });
          return results.map((r) => ({
            topic: r.topicName,
            partition: r.partition,
            baseOffset: r.baseOffset ?? r.offset ?? '-1',
          }));
        } catch (error) {
          // kafkajs takes back the sequence numbers of a whole request when any part of it failed,
          // also of partitions the broker did write: the next send of those is out of order, or
          // taken by the broker for a duplicate and dropped. After a failed send, and after the
          // broker lost this producer's state (restart: out of order, unknown producer id, fenced
          // epoch), a new producer id starts every sequence afresh; resending duplicates nothing
          // the inbox does not skip.
          if (current === producer) {
            current = undefined;
            void producer.then((p) => p.disconnect()).catch(() => {});
            options.logger.warn(
              { err: error, reason: protocolErrorType(error) },
              'send failed: the producer is made again for the next one',
            );
          }
          const reason = protocolErrorType(error);
          if (reason !== undefined && REFUSED_FOR_GOOD.has(reason)) {
            throw new RecordsRefusedError(reason, (error as Error).message);
          }
          throw error;
        }
      };
      return {
        send(batches) {
          const mine = turn.then(() => send(batches));
          turn = mine.catch(() => {});
          return mine;
        },
        async disconnect() {
          closed = true;
          const producer = current;
          current = undefined;
          await (await producer)?.disconnect();
        },
      };
    },

    async consumer(opts: ConsumerOptions): Promise<Consumer> {
      const consumer = kafka.consumer({
        groupId: opts.groupId,
        sessionTimeout: opts.sessionTimeoutMs ?? 30_000,
        rebalanceTimeout: opts.rebalanceTimeoutMs ?? 60_000,
        maxBytesPerPartition: opts.maxBytesPerPartition ?? 1_048_576,
        maxWaitTimeInMs: opts.maxWaitTimeMs ?? 500,
        allowAutoTopicCreation: false,
      });
      await consumer.connect();
      await consumer.subscribe({ topics: opts.topics, fromBeginning: opts.fromBeginning ?? true });
      const admin = kafka.admin();
      let adminConnected = false;
      // Offsets leave in the background, one request at a time, the newest per partition: every
      // partition done while a request is out travels in the next one. A handler never waits on
      // the broker for them; a crash before they land only redelivers what the inbox then skips.
      const pending = new Map<string, { topic: string; partition: number; offset: string }>();
      let inFlight: Promise<void> | undefined;
      const sendOffsets = async () => {
        while (pending.size > 0) {
          const offsets = [...pending.values()];
          pending.clear();
          await consumer.commitOffsets(offsets).catch((err) => {
            // A rebalance or a broker away: whoever consumes the partition next commits past it.
            options.logger.debug({ err, offsets }, 'offsets not committed');
          });
        }
        inFlight = undefined;
      };
      const commitSoon = (topic: string, partition: number, offset: string) => {
        pending.set(`${partition}\u001f${topic}`, { topic, partition, offset });
        inFlight ??= sendOffsets();
      };
      // A partition's batch is handled while the next one is fetched: eachBatch hands the batch
      // over, resolves its offsets for fetching (not for committing) and returns, so that kafkajs
      // fetches on instead of waiting for every partition's batch before the next fetch (most of
      // the inbox consumer's idle time). The next batch of the partition waits in eachBatch for
      // the previous one: batches of a partition are still handled one at a time, in order, and at
      // most one more is held. A handler that fails moves the partition back to its first
      // uncommitted message (seek), so that nothing after it is handled first.
      const handling = new Map<string, Promise<void>>();
      const slots = semaphore(opts.partitionsConsumedConcurrently ?? 1);
      let closing = false;
      /** Before leaving the group: no new batch, the running ones finished (bounded), their offsets sent. */
      const drain = async () => {
        closing = true;
        await settled(
          Promise.all(handling.values()).then(() => {}),
          10_000,
        );
        await settled(inFlight);
      };
      // Seeks are taken only once run() has started; they apply as the group hands out partitions.
      const seekToStart = () => {
        for (const { topic, partition, offset } of opts.startAt ?? []) consumer.seek({ topic, partition, offset });
      };
      // kafkajs starts a crashed consumer again only when the crash was retriable. One that met a
      // non-retriable error while the broker came back (GroupCoordinatorNotFound while the
      // coordinator is being elected) left its group for good, silently, while the service ran
      // on: issue 31's chaos-run stall, where data-webhooks stopped queueing deliveries after a
      // broker fault (ADR 79). Such a consumer is started again here, with backoff, until it
      // joins; stopping ends the attempts.
      let runConfig: Parameters<typeof consumer.run>[0] | undefined;
      let revivals = 0;
      let reviving: NodeJS.Timeout | undefined;
      const revive = async () => {
        reviving = undefined;
        if (closing || !runConfig) return;
        try {
          await consumer.connect();
          if (closing) return; // stopped meanwhile: stop or disconnect ends what connect made
          await consumer.run(runConfig);
        } catch (err) {
          options.logger.error({ err, groupId: opts.groupId }, 'consumer could not be started again; retrying');
          scheduleRevival();
        }
      };
      const scheduleRevival = () => {
        if (closing || reviving) return;
        const delayMs = Math.min(REVIVAL_MAX_MS, REVIVAL_FIRST_MS * 2 ** Math.min(revivals++, 10));
        reviving = setTimeout(() => void revive(), delayMs);
        reviving.unref();
      };
      consumer.on(consumer.events.GROUP_JOIN, () => {
        revivals = 0;
      });
      consumer.on(consumer.events.CRASH, ({ payload }) => {
        if (payload.restart || closing) return;
        options.logger.error(
          { err: payload.error, groupId: opts.groupId },
          'consumer crashed and kafkajs will not restart it; starting it again',
        );
        scheduleRevival();
      });
      return {
        async run(handle) {
          runConfig = {
            autoCommit: false,
            eachBatchAutoResolve: false,
            partitionsConsumedConcurrently: opts.partitionsConsumedConcurrently ?? 1,
            eachBatch: async ({ batch, heartbeat, isRunning, isStale, resolveOffset }) => {
              const tp = `${batch.partition}\u001f${batch.topic}`;
              await handling.get(tp);
              // Stale: the previous batch failed and moved the partition back; this one comes again.
              if (closing || !isRunning() || isStale()) {
                if (closing) await sleep(50); // refetched until stop, which is soon
                return;
              }
              const messages: IncomingMessage[] = batch.messages.map(
                (m) => new Incoming(batch.topic, batch.partition, m.offset, m.key, m.value, m.headers, m.timestamp),
              );
              const last = messages.at(-1);
              if (!last) return;
              let committed: string | undefined;
              const commit = async (message: IncomingMessage) => {
                commitSoon(batch.topic, batch.partition, (BigInt(message.offset) + 1n).toString());
                committed = message.offset;
              };
              // Stopping ends the handler's retries; what it finished is still committed.
              const running = () => isRunning() && !closing;
              const work = (async () => {
                await slots.acquire();
                try {
                  await handle({
                    topic: batch.topic,
                    partition: batch.partition,
                    messages,
                    heartbeat,
                    commit,
                    isRunning: running,
                    isStale,
                  });
                  if (committed !== last.offset && isRunning() && !isStale()) await commit(last);
                } catch (err) {
                  if (!running()) return; // stopping: whoever consumes next starts at the last commit
                  const from =
                    committed === undefined
                      ? (messages[0] as IncomingMessage).offset
                      : (BigInt(committed) + 1n).toString();
                  options.logger.error(
                    { err, topic: batch.topic, partition: batch.partition, from },
                    'batch handler failed; consuming the partition again from its first uncommitted message',
                  );
                  await sleep(1000);
                  try {
                    consumer.seek({ topic: batch.topic, partition: batch.partition, offset: from });
                  } catch (error) {
                    // Stopped meanwhile: the next consumer starts at the last commit anyway.
                    options.logger.debug({ err: error }, 'seek after a failed batch not taken');
                  }
                } finally {
                  slots.release();
                }
              })();
              handling.set(tp, work);
              void work.finally(() => {
                if (handling.get(tp) === work) handling.delete(tp);
              });
              resolveOffset(last.offset);
            },
          };
          await consumer.run(runConfig);
          seekToStart();
        },
        async stop() {
          clearTimeout(reviving);
          await drain();
          await consumer.stop();
        },
        async disconnect() {
          clearTimeout(reviving);
          await drain();
          await consumer.disconnect();
          if (adminConnected) await admin.disconnect();
        },
        async committedOffsets(topic) {
          if (!adminConnected) {
            await admin.connect();
            adminConnected = true;
          }
          const [entry] = await admin.fetchOffsets({ groupId: opts.groupId, topics: [topic] });
          return new Map((entry?.partitions ?? []).map((p) => [p.partition, p.offset]));
        },
      };
    },

    async admin(): Promise<Admin> {
      const admin = kafka.admin();
      await admin.connect();
      return {
        async ping() {
          await admin.describeCluster();
        },
        async brokerCount() {
          return (await admin.describeCluster()).brokers.length;
        },
        async partitionReplicas(topic) {
          const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
          return (topics[0]?.partitions ?? [])
            .map((p) => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr }))
            .sort((a, b) => a.partition - b.partition);
        },
        async ensureTopics(specs) {
          const existing = new Set(await admin.listTopics());
          const missing = specs.filter((s) => !existing.has(s.name));
          if (missing.length === 0) return [];
          const replication = await replicationOf(admin);
          await admin.createTopics({
            waitForLeaders: false,
            topics: missing.map((s) => {
              const factor = s.replicationFactor ?? replication;
              const config = { 'min.insync.replicas': String(minInsyncReplicas(factor)), ...s.config };
              return {
                topic: s.name,
                numPartitions: s.partitions,
                replicationFactor: factor,
                configEntries: Object.entries(config).map(([name, value]) => ({ name, value })),
              };
            }),
          });
          // A topic is usable once every broker knows it; until then producing fails.
          const names = missing.map((s) => s.name);
          const deadline = Date.now() + 15_000;
          // Every 100 ms for at most 15 s.
          await retryWithBackoff(
            async () => {
              const { topics } = await admin.fetchTopicMetadata({ topics: names });
              if (!topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))) {
                throw new Error(`topics ${names.join(', ')} have no leaders yet`);
              }
            },
            { initialMs: 100, maxMs: 100, retryIf: () => Date.now() <= deadline },
          );
          return names;
        },
        async deleteTopics(names) {
          if (names.length > 0) await admin.deleteTopics({ topics: names });
        },
        listTopics: () => admin.listTopics(),
        async partitionOffsets(topic) {
          const offsets = await admin.fetchTopicOffsets(topic);
          return offsets
            .map((o) => ({ partition: o.partition, low: o.low, high: o.high }))
            .sort((a, b) => a.partition - b.partition);
        },
        async offsetsAt(topic, timestamp) {
          const [found, ends] = await Promise.all([
            admin.fetchTopicOffsetsByTimestamp(topic, timestamp),
            admin.fetchTopicOffsets(topic),
          ]);
          return found
            .map((f) => ({
              partition: f.partition,
              offset: f.offset === '-1' ? (ends.find((e) => e.partition === f.partition)?.high ?? '0') : f.offset,
            }))
            .sort((a, b) => a.partition - b.partition);
        },
        async consumerLag(groupId, topic) {
          const [committed] = await admin.fetchOffsets({ groupId, topics: [topic] });
          const ends = await admin.fetchTopicOffsets(topic);
          let lag = 0n;
          for (const end of ends) {
            const c = committed?.partitions.find((p) => p.partition === end.partition)?.offset ?? '-1';
            const from = c === '-1' ? BigInt(end.low) : BigInt(c);
            lag += BigInt(end.high) - from;
          }
          return Number(lag);
        },
        async createAcls(rules) {
          if (rules.length === 0) return;
          await admin.createAcls({
            acl: rules.map((r) => ({
              principal: r.principal,
              host: '*',
              resourceType: r.resourceType === 'Topic' ? AclResourceTypes.TOPIC : AclResourceTypes.GROUP,
              resourceName: r.name,
              resourcePatternType:
                r.patternType === 'Literal' ? ResourcePatternTypes.LITERAL : ResourcePatternTypes.PREFIXED,
              operation: ACL_OPERATIONS[r.operation],
              permissionType: AclPermissionTypes.ALLOW,
            })),
          });
        },
        async maxMessageBytes(topics) {
          const { resources } = await admin.describeConfigs({
            includeSynonyms: false,
            resources: topics.map((name) => ({
              type: TOPIC_RESOURCE,
              name,
              configNames: ['max.message.bytes'],
            })),
          });
          const limits = new Map<string, number>();
          for (const r of resources) {
            const value = Number(r.configEntries.find((c) => c.configName === 'max.message.bytes')?.configValue);
            if (r.errorCode === 0 && Number.isInteger(value) && value > 0) limits.set(r.resourceName, value);
          }
          return limits;
        },
        async alterTopicConfig(topic, config) {
          // AlterConfigs replaces a resource's whole configuration: the entries set now are merged in.
          const { resources } = await admin.describeConfigs({
            includeSynonyms: false,
            resources: [{ type: TOPIC_RESOURCE, name: topic }],
          });
          const set = (resources[0]?.configEntries ?? [])
            .filter((c) => c.configSource === SET_ON_TOPIC)
            .map((c) => ({ name: c.configName, value: c.configValue }));
          const entries = new Map(set.map((e) => [e.name, e.value]));
          for (const [name, value] of Object.entries(config)) entries.set(name, value);
          await admin.alterConfigs({
            validateOnly: false,
            resources: [
              {
                type: TOPIC_RESOURCE,
                name: topic,
                configEntries: [...entries].map(([name, value]) => ({ name, value })),
              },
            ],
          });
        },
        disconnect: () => admin.disconnect(),
      };
    },
  };
}

/**
 * The replication factor of new topics (docs/adr/0053): 3 on a cluster of three brokers or more,
 * 1 on a single broker. The cluster's own `default.replication.factor` says it, so that a topic
 * created while one of three brokers is away still gets three replicas (the broker count alone
 * would say 2); a broker that does not say falls back to the count of brokers up, capped at 3.
 */
async function replicationOf(admin: KafkaAdmin): Promise<number> {
  const { brokers } = await admin.describeCluster();
  const up = Math.min(3, Math.max(1, brokers.length));
  try {
    const { resources } = await admin.describeConfigs({
      includeSynonyms: false,
      resources: brokers.map((b) => ({ type: BROKER_RESOURCE, name: String(b.nodeId) })).slice(0, 1),
    });
    const entry = resources[0]?.configEntries.find((c) => c.configName === 'default.replication.factor');
    const factor = Number(entry?.configValue);
    if (Number.isInteger(factor) && factor >= 1) return Math.min(factor, 3);
  } catch {
    // an older broker or no DescribeConfigs right on the cluster: the count of brokers up
  }
  return up;
}

/** Acknowledged (acks=all) once two copies have it on three replicas; one copy on a single broker. */
export function minInsyncReplicas(replicationFactor: number): number {
  return replicationFactor >= 3 ? 2 : 1;
}

// Node's ESM loader does not see these among kafkajs's CommonJS named exports.
const { AclOperationTypes, AclPermissionTypes, AclResourceTypes, ResourcePatternTypes } = kafkajs;
const ACL_OPERATIONS = {
  Read: AclOperationTypes.READ,
  Write: AclOperationTypes.WRITE,
  DescribeConfigs: AclOperationTypes.DESCRIBE_CONFIGS,
} as const;

/** At most `permits` holders at once; the others wait in arrival order. */
function semaphore(permits: number) {
  const waiting: (() => void)[] = [];
  let free = permits;
  return {
    acquire(): Promise<void> {
      if (free > 0) {
        free--;
        return Promise.resolve();
      }
      return new Promise((resolve) => waiting.push(resolve));
    },
    release(): void {
      const next = waiting.shift();
      if (next) next();
      else free++;
    },
  };
}

/** Waits for offsets in flight, but not for a broker that does not answer. */
async function settled(work: Promise<void> | undefined, boundMs = 2000): Promise<void> {
  if (!work) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work, new Promise((resolve) => (timer = setTimeout(resolve, boundMs)))]);
  clearTimeout(timer);
}

type RawHeaders = Record<string, Buffer | string | (Buffer | string)[] | undefined> | undefined;

/** A record as a handler sees it. Its headers are decoded when first read: most handlers never do. */
class Incoming implements IncomingMessage {
  readonly key: string | null;
  private decoded: Headers | undefined;
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly offset: string,
    key: Buffer | null,
    readonly value: Buffer | null,
    private readonly raw: RawHeaders,
    readonly timestamp: string,
  ) {
    this.key = key ? key.toString('utf8') : null;
  }

  get headers(): Headers {
    this.decoded ??= decodeHeaders(this.raw);
    return this.decoded;
  }

  /** JSON carries the headers, as it would a plain record's (a spread copy does not: read them first). */
  toJSON() {
    const { topic, partition, offset, key, value, headers, timestamp } = this;
    return { topic, partition, offset, key, value, headers, timestamp };
  }
}

function decodeHeaders(headers: RawHeaders): Headers {
  // Header names are the producer's: one named `__proto__` is a header, not this object's prototype.
  const out: Headers = Object.create(null);
  for (const [k, v] of Object.entries(headers ?? {})) {
    if (v === undefined) continue;
    const first = Array.isArray(v) ? v[0] : v;
    if (first !== undefined) out[k] = first.toString();
  }
  return out;
}
