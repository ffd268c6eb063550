import type { AclRule } from '../kafka/broker.js';
import { dlqOf, physicalTopic, TOPIC_NAMES, type TopicName } from '../kafka/topics.js';
import { producersOf, TOPIC_CONSUMERS } from './contract.js';
import { EVENT_TYPES, type EventType, PRODUCERS, type ProducerName } from './envelope.js';

export type { AclRule };

/**
 * The broker's ACLs, generated from the topic catalogue and the event contract (docs/adr/0024):
 * each service's principal may write the topics it produces events on, read the topics its
 * consumer groups read (with those groups only), and write the dead-letter twins of what it
 * reads. Nothing else: no create, no delete, no other group. The admin is a super user.
 */

export interface AclOptions {
  /** ONTO_TOPIC_PREFIX: names topics and groups on the broker. */
  prefix?: string;
  /** The SASL user of each service; `User:<name>` is its principal. The service's name unless told. */
  userOf?: (service: ProducerName) => string;
  /** data's CDC sources (CDC_MAPPINGS): it reads `cdc.raw.<source>` and dead-letters them. */
  cdcSources?: readonly string[];
}

/** The topics data's live readers and webhook deliveries follow (services/data/src/live/topics.ts). */
const LIVE_READ_TOPICS: TopicName[] = [
  'onto.changes.objects',
  'onto.changes.links',
  'onto.series.points',
  'domain.alerts',
  'domain.decisions',
  'domain.actions',
];
/** Each data instance's live reader is a group of its own under this prefix. */
export const LIVE_GROUP_PREFIX = 'data-live-';
/** The group that turns events into webhook deliveries (services/data/src/webhooks). */
export const WEBHOOK_GROUP = 'data-webhooks';

/** The CDC consumer's group (services/data/src/cdc/plugin.ts). */
const CDC_GROUP = 'data-cdc';
const CDC_TOPIC_PREFIX = 'cdc.raw.';

/** The topics on which each service produces, from each event type's producer. */
export function producedTopics(service: ProducerName): TopicName[] {
  const topics = new Set<TopicName>();
  for (const [type, topic] of Object.entries(EVENT_TYPES) as [EventType, TopicName][]) {
    if (producersOf(type, topic).includes(service)) topics.add(topic);
  }
  return TOPIC_NAMES.filter((t) => topics.has(t));
}

export function serviceAcls(options: AclOptions = {}): AclRule[] {
  const prefix = options.prefix ?? '';
  const userOf = options.userOf ?? ((s: ProducerName) => s);
  const rules = new Map<string, AclRule>();
  const allow = (service: ProducerName, rule: Omit<AclRule, 'principal'>) => {
    const full = { principal: `User:${userOf(service)}`, ...rule };
    rules.set(JSON.stringify(full), full);
  };
  const topic = (name: string, operation: AclRule['operation']) =>
    ({ resourceType: 'Topic', patternType: 'Literal', name: physicalTopic(prefix, name), operation }) as const;

  for (const service of PRODUCERS) {
    for (const t of producedTopics(service)) allow(service, topic(t, 'Write'));
    // Every service reads the platform topics' max.message.bytes to refuse oversized events (record-limits.ts).
    for (const t of TOPIC_NAMES) allow(service, topic(t, 'DescribeConfigs'));
  }
  for (const t of TOPIC_NAMES) {
    for (const { service, group } of TOPIC_CONSUMERS[t]) {
      const consumer = service as ProducerName;
      allow(consumer, topic(t, 'Read'));
      allow(consumer, { resourceType: 'Group', patternType: 'Literal', name: `${prefix}${group}`, operation: 'Read' });
      // A refused record goes to the topic's dead-letter twin (messaging/dead-letters.ts).
      allow(consumer, topic(dlqOf(t), 'Write'));
    }
  }
  // data's live event readers (a group per instance, docs/adr/0059) and its webhook deliveries
  // (docs/adr/0060) read the topics subscribers and webhooks follow.
  for (const t of LIVE_READ_TOPICS) allow('data', topic(t, 'Read'));
  allow('data', {
    resourceType: 'Group',
    patternType: 'Prefixed',
    name: `${prefix}${LIVE_GROUP_PREFIX}`,
    operation: 'Read',
  });
  allow('data', {
    resourceType: 'Group',
    patternType: 'Literal',
    name: `${prefix}${WEBHOOK_GROUP}`,
    operation: 'Read',
  });
  for (const t of LIVE_READ_TOPICS) allow('data', topic(dlqOf(t), 'Write'));
  const sources = options.cdcSources ?? [];
  if (sources.length > 0) {
    allow('data', {
      resourceType: 'Topic',
      patternType: 'Prefixed',
      name: physicalTopic(prefix, CDC_TOPIC_PREFIX),
      operation: 'Read',
    });
    allow('data', { resourceType: 'Group', patternType: 'Literal', name: `${prefix}${CDC_GROUP}`, operation: 'Read' });
    for (const source of sources) allow('data', topic(dlqOf(`${CDC_TOPIC_PREFIX}${source}`), 'Write'));
  }
  return [...rules.values()];
}

/** The same rules as `kafka-acls.sh` arguments, one invocation per rule (after `--bootstrap-server …`). */
export function kafkaAclsCommands(rules: readonly AclRule[]): string[][] {
  return rules.map((r) => [
    '--add',
    '--allow-principal',
    r.principal,
    '--operation',
    r.operation,
    r.resourceType === 'Topic' ? '--topic' : '--group',
    r.name,
    '--resource-pattern-type',
    r.patternType.toLowerCase(),
  ]);
}
