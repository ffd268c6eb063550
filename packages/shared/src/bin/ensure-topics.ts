#!/usr/bin/env node
import { Type } from '@sinclair/typebox';
import { pino } from 'pino';
import { retryWithBackoff } from '../backoff.js';
import { BrokerList, ConfigError, loadConfig } from '../config/load.js';
import { createKafkaBroker } from '../kafka/kafkajs-broker.js';
import { platformTopics } from '../kafka/topics.js';

// Used by ./onto up: waits until the broker answers a metadata request, then creates the
// platform's topics (and their .dlq twins) that are missing.
const Schema = Type.Object({
  KAFKA_BROKERS: BrokerList,
  ONTO_KAFKA_PARTITIONS: Type.Integer({ minimum: 1, maximum: 1000, default: 6 }),
  ONTO_TOPIC_PREFIX: Type.String({ default: '', pattern: '^[a-zA-Z0-9._-]*$' }),
  ONTO_KAFKA_WAIT_MS: Type.Integer({ minimum: 0, default: 60_000 }),
});

const log = pino({ level: process.env.LOG_LEVEL ?? 'info' });

async function main() {
  const config = loadConfig(Schema, process.env);
  const broker = createKafkaBroker({
    brokers: config.KAFKA_BROKERS.split(','),
    clientId: 'onto-ensure-topics',
    logger: log,
    retries: 0,
  });
  const deadline = Date.now() + config.ONTO_KAFKA_WAIT_MS;
  // Every 500 ms until the broker answers or the wait is over.
  await retryWithBackoff(
    async () => {
      const admin = await broker.admin();
      try {
        await admin.ping();
        const created = await admin.ensureTopics(
          platformTopics(config.ONTO_TOPIC_PREFIX, config.ONTO_KAFKA_PARTITIONS),
        );
        log.info({ created, partitions: config.ONTO_KAFKA_PARTITIONS }, 'kafka topics ready');
      } finally {
        await admin.disconnect();
      }
    },
    { initialMs: 500, maxMs: 500, retryIf: () => Date.now() <= deadline },
  );
}

main().catch((error) => {
  if (error instanceof ConfigError) log.fatal(error.message);
  else log.fatal({ err: error }, 'could not prepare kafka topics');
  process.exit(1);
});
