/**
 * patches/kafkajs@2.2.4.patch (docs/adr/0063): a send retries only once every request of the
 * failed attempt has settled. kafkajs retried as soon as one request failed, while requests to
 * other brokers were still in flight; one failing later took back sequence numbers the retry had
 * used, and new records could go out with a sequence number the broker already held, which it
 * acknowledges as a duplicate and drops. The 3-broker chaos run found acknowledged changes missing
 * from the topic that way. kafkajs's own `sendMessages`, driven here with a cluster of two stub
 * brokers, so that the order and timing of answers is the test's.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
type Send = (args: {
  acks: number;
  timeout?: number;
  compression?: number;
  topicMessages: { topic: string; messages: { key: string; value: string }[] }[];
}) => Promise<unknown[]>;
const createSendMessages = require('kafkajs/src/producer/sendMessages') as (deps: unknown) => Send;
const createRetry = require('kafkajs/src/retry') as (opts: unknown) => unknown;
const { KafkaJSProtocolError } = require('kafkajs/src/errors') as {
  KafkaJSProtocolError: new (e: { message: string; type: string; code: number; retriable: boolean }) => Error;
};

const logger = { debug() {}, info() {}, warn() {}, error() {} };
const notLeader = () =>
  new KafkaJSProtocolError({
    message: 'This server is not the leader for that topic-partition',
    type: 'NOT_LEADER_FOR_PARTITION',
    code: 6,
    retriable: true,
  });

/**
 * A cluster of two brokers leading one partition each: broker 0 answers after `slowMs`, broker 1's
 * first produce fails at once. Every produce is logged when it starts and when it ends.
 */
function stubs(slowMs: number) {
  const log: string[] = [];
  const firstSequences: Record<number, number[]> = { 0: [], 1: [] };
  let failures = 1;
  const broker = (nodeId: number) => ({
    nodeId,
    async produce({ topicData }: { topicData: { partitions: { partition: number; firstSequence: number }[] }[] }) {
      for (const t of topicData) for (const p of t.partitions) firstSequences[p.partition]?.push(p.firstSequence);
      log.push(`start ${nodeId}`);
      if (nodeId === 0) await new Promise((r) => setTimeout(r, slowMs));
      log.push(`end ${nodeId}`);
      if (nodeId === 1 && failures-- > 0) throw notLeader();
      return { topics: topicData.map(() => ({ topicName: 't', partitions: [] })) };
    },
  });
  const brokers = new Map([
    [0, broker(0)],
    [1, broker(1)],
  ]);
  const sequences = new Map<number, number>();
  const cluster = {
    targetTopics: new Set<string>(),
    async addMultipleTargetTopics() {},
    async refreshMetadataIfNecessary() {},
    async refreshMetadata() {},
    isConnected: () => true,
    removeBroker() {},
    findTopicPartitionMetadata: () => [
      { partitionId: 0, leader: 0, replicas: [0, 1], isr: [0, 1] },
      { partitionId: 1, leader: 1, replicas: [0, 1], isr: [0, 1] },
    ],
    // Partition n is led by broker n.
    findLeaderForPartitions: (_topic: string, partitions: string[]) =>
      Object.fromEntries(partitions.map((p) => [p, [Number(p)]])),
    findBroker: async ({ nodeId }: { nodeId: string }) => brokers.get(Number(nodeId)),
  };
  const eosManager = {
    isInitialized: () => true,
    isTransactional: () => false,
    getProducerId: () => 7,
    getProducerEpoch: () => 0,
    getTransactionalId: () => undefined,
    getSequence: (_t: string, p: number) => sequences.get(p) ?? 0,
    updateSequence: (_t: string, p: number, n: number) => sequences.set(p, (sequences.get(p) ?? 0) + n),
    // Per broker, as kafkajs's: the stubs hold no lock, so requests to both brokers overlap.
    acquireBrokerLock: async () => {},
    releaseBrokerLock: async () => {},
  };
  const send = createSendMessages({
    logger,
    cluster,
    partitioner: ({ message }: { message: { key: string } }) => Number(message.key),
    eosManager,
    retrier: createRetry({ retries: 5, initialRetryTime: 1, maxRetryTime: 5 }),
  });
  const messages = [
    { key: '0', value: 'a' },
    { key: '1', value: 'b' },
  ];
  return { send: () => send({ acks: -1, topicMessages: [{ topic: 't', messages }] }), log, firstSequences, sequences };
}

describe('kafkajs sendMessages, as patched', () => {
  it('retries a failed request only after every request of the attempt has settled, with the same sequence numbers', async () => {
    const { send, log, firstSequences, sequences } = stubs(50);
    await expect(send()).resolves.toBeDefined();
    // Broker 1 failed at once; its retry began only after broker 0 had answered.
    expect(log.indexOf('start 1', log.indexOf('end 1') + 1)).toBeGreaterThan(log.indexOf('end 0'));
    // Partition 0, acknowledged, was sent once; partition 1 again with the sequence it had.
    expect(firstSequences).toEqual({ 0: [0], 1: [0, 0] });
    expect([sequences.get(0), sequences.get(1)]).toEqual([1, 1]);
  });

  it('resolves once every partition is acknowledged, whichever broker answers first', async () => {
    const { send, firstSequences } = stubs(0);
    await expect(send()).resolves.toBeDefined();
    expect(firstSequences[0]).toEqual([0]);
  });
});
