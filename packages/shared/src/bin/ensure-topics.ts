#!/usr/bin/env node
import { Type } from '@sinclair/typebox';
import { pino } from 'pino';
import { retryWithBackoff } from '../backoff.js';
import { BrokerList, ConfigError, kafkaSaslConfigSchema, kafkaSaslOf, loadConfig } from '../config/load.js';
import { kafkaAclsCommands, serviceAcls } from '../events/acls.js';
import { createKafkaBroker } from '../kafka/kafkajs-broker.js';
import { AUDIT_RETENTION_DAYS, platformTopics } from '../kafka/topics.js';

// Used by ./onto up and compose: waits until the broker answers a metadata request, then creates
// the platform's topics (and their .dlq twins) that are missing and, with ONTO_KAFKA_ACLS=on,
// adds the services' ACLs (docs/adr/0024) as the admin user given by KAFKA_SASL_*.
// `--print-acls` only prints those ACLs as kafka-acls.sh arguments, one line per rule.
const Schema = Type.Composite([
  kafkaSaslConfigSchema(),
  Type.Object({
    KAFKA_BROKERS: BrokerList,
    ONTO_KAFKA_PARTITIONS: Type.Integer({ minimum: 1, maximum: 1000, default: 6 }),
    ONTO_TOPIC_PREFIX: Type.String({ default: '', pattern: '^[a-zA-Z0-9._-]*$' }),
    ONTO_AUDIT_RETENTION_DAYS: Type.Integer({
      minimum: 1,
      default: AUDIT_RETENTION_DAYS,
      description: "onto.audit's retention.ms in days, set when the topic is created (docs/adr/0084)",
    }),
    ONTO_KAFKA_WAIT_MS: Type.Integer({ minimum: 0, default: 60_000 }),
    ONTO_KAFKA_ACLS: Type.Union([Type.Literal('on'), Type.Literal('off')], { default: 'off' }),
    ONTO_KAFKA_CDC_SOURCES: Type.String({
      default: '',
      pattern: '^[A-Za-z0-9._,-]*$',
      description: "data's CDC sources, comma-separated: it reads cdc.raw.<source>",
    }),
  }),
]);

const log = pino({ level: process.env.LOG_LEVEL ?? 'info' });

async function main() {
  if (process.argv.includes('--print-acls')) {
    const prefix = process.env.ONTO_TOPIC_PREFIX ?? '';
    const cdcSources = (process.env.ONTO_KAFKA_CDC_SOURCES ?? '').split(',').filter(Boolean);
    for (const args of kafkaAclsCommands(serviceAcls({ prefix, cdcSources })))
      process.stdout.write(`${args.join(' ')}\n`);
    return;
  }
  const config = loadConfig(Schema, process.env);
  const acls =
    config.ONTO_KAFKA_ACLS === 'on'
      ? serviceAcls({
          prefix: config.ONTO_TOPIC_PREFIX,
          cdcSources: config.ONTO_KAFKA_CDC_SOURCES.split(',').filter(Boolean),
        })
      : [];
  const broker = createKafkaBroker({
    brokers: config.KAFKA_BROKERS.split(','),
    clientId: 'onto-ensure-topics',
    logger: log,
    retries: 0,
    sasl: kafkaSaslOf(config),
  });
  const deadline = Date.now() + config.ONTO_KAFKA_WAIT_MS;
  // Every 500 ms until the broker answers or the wait is over.
  await retryWithBackoff(
    async () => {
      const admin = await broker.admin();
      try {
        await admin.ping();
        const created = await admin.ensureTopics(
          platformTopics(config.ONTO_TOPIC_PREFIX, config.ONTO_KAFKA_PARTITIONS, config.ONTO_AUDIT_RETENTION_DAYS),
        );
        log.info({ created, partitions: config.ONTO_KAFKA_PARTITIONS }, 'kafka topics ready');
        await admin.createAcls(acls);
        if (acls.length > 0) log.info({ rules: acls.length }, 'kafka ACLs ready');
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
