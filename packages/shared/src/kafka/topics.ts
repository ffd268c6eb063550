/**
 * Every topic of onto and how its partition key is built, in one place (architecture §3).
 * A key is a branded string that only the catalog can make, so a producer cannot publish to a
 * topic with a key of another topic's shape.
 */

declare const keyBrand: unique symbol;
export type PartitionKey<T extends TopicName> = string & { readonly [keyBrand]: T };

const enc = encodeURIComponent;
const make = <T extends TopicName>(parts: string[]) => parts.map(enc).join('/') as PartitionKey<T>;

export const TOPICS = {
  'onto.schema': { producer: 'control', key: (p: { worldId: string }) => make<'onto.schema'>([p.worldId]) },
  'onto.worlds': { producer: 'control', key: (p: { worldId: string }) => make<'onto.worlds'>([p.worldId]) },
  'onto.identity': { producer: 'control', key: (p: { userId: string }) => make<'onto.identity'>([p.userId]) },
  'onto.storage': { producer: 'data', key: (p: { worldId: string }) => make<'onto.storage'>([p.worldId]) },
  // Not in the original topic table: intelligence's own reports to control (world provisioning).
  'onto.intelligence': {
    producer: 'intelligence',
    key: (p: { worldId: string }) => make<'onto.intelligence'>([p.worldId]),
  },
  'onto.changes.objects': {
    producer: 'data',
    key: (p: { worldId: string; objectType: string; pk: string }) =>
      make<'onto.changes.objects'>([p.worldId, p.objectType, p.pk]),
  },
  'onto.changes.links': {
    producer: 'data',
    key: (p: { worldId: string; linkType: string; linkPk: string }) =>
      make<'onto.changes.links'>([p.worldId, p.linkType, p.linkPk]),
  },
  // Not in the original topic table: points of time series, one event per written batch of an object's series.
  'onto.series.points': {
    producer: 'data',
    key: (p: { worldId: string; objectType: string; pk: string }) =>
      make<'onto.series.points'>([p.worldId, p.objectType, p.pk]),
  },
  'domain.alerts': {
    producer: 'intelligence',
    key: (p: { worldId: string; alertType: string }) => make<'domain.alerts'>([p.worldId, p.alertType]),
  },
  'domain.decisions': {
    producer: 'intelligence',
    key: (p: { worldId: string; decisionId: string }) => make<'domain.decisions'>([p.worldId, p.decisionId]),
  },
  'domain.actions': {
    producer: 'intelligence',
    key: (p: { worldId: string; actionId: string }) => make<'domain.actions'>([p.worldId, p.actionId]),
  },
  // Not in the original topic table: who changed what, from all three services, for control's
  // audit read model (docs/adr/0084); `*` keys the actions of no world.
  'onto.audit': { producer: 'control', key: (p: { worldId: string }) => make<'onto.audit'>([p.worldId]) },
} as const;

export type TopicName = keyof typeof TOPICS;
export const TOPIC_NAMES = Object.keys(TOPICS) as TopicName[];

/** Raw change data from external sources (`cdc.raw.<source>`), keyed by the source's primary key. */
export const CDC_TOPIC_PATTERN = /^cdc\.raw\.[a-zA-Z0-9_-]+$/;
export const cdcKey = (sourcePk: string) => enc(sourcePk) as PartitionKey<TopicName>;

export const dlqOf = (topic: string) => `${topic}.dlq`;

/** Topic names as they are on the broker: an optional prefix isolates test runs and tenants. */
export function physicalTopic(prefix: string, topic: string): string {
  return `${prefix}${topic}`;
}

/**
 * Topics with a fixed partition count whatever the platform's: onto.identity has one partition,
 * so that a heartbeat orders after every revocation published before it (docs/adr/0006).
 */
export const FIXED_PARTITIONS: Partial<Record<TopicName, number>> = { 'onto.identity': 1 };

/** How long onto.audit keeps its records unless told (ONTO_AUDIT_RETENTION_DAYS): a year. */
export const AUDIT_RETENTION_DAYS = 365;

/** Topic configs of the platform beyond the broker's defaults: onto.audit's retention (docs/adr/0084). */
function topicConfig(topic: TopicName, auditRetentionDays: number): Record<string, string> | undefined {
  return topic === 'onto.audit' ? { 'retention.ms': String(auditRetentionDays * 86_400_000) } : undefined;
}

/** Every topic the platform needs, with its dead-letter twin. */
export function platformTopics(prefix: string, partitions: number, auditRetentionDays = AUDIT_RETENTION_DAYS) {
  return TOPIC_NAMES.flatMap((t) =>
    [t, dlqOf(t)].map((name) => {
      const config = name === t ? topicConfig(t, auditRetentionDays) : undefined;
      return {
        name: physicalTopic(prefix, name),
        partitions: FIXED_PARTITIONS[t] ?? partitions,
        ...(config ? { config } : {}),
      };
    }),
  );
}
