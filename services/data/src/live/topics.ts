import { EVENT_TYPES, type EventType, type TopicName } from '@onto/shared';

/** The topics a live subscriber or a webhook may follow, by the short names the API takes. */
export const LIVE_TOPICS = {
  objects: 'onto.changes.objects',
  links: 'onto.changes.links',
  series: 'onto.series.points',
  alerts: 'domain.alerts',
  decisions: 'domain.decisions',
  actions: 'domain.actions',
} as const satisfies Record<string, TopicName>;

export type LiveTopic = keyof typeof LIVE_TOPICS;
export const LIVE_TOPIC_NAMES = Object.keys(LIVE_TOPICS) as LiveTopic[];
/** Catalogue topic → its index in LIVE_TOPIC_NAMES. */
export const LIVE_TOPIC_INDEX = new Map<string, number>(LIVE_TOPIC_NAMES.map((t, i) => [LIVE_TOPICS[t], i]));

/** Every event type carried by the live topics. */
export const LIVE_EVENT_TYPES = (Object.entries(EVENT_TYPES) as [EventType, TopicName][])
  .filter(([, topic]) => LIVE_TOPIC_INDEX.has(topic))
  .map(([type]) => type);

/** The live topic (by index) that carries an event type, or undefined. */
export function topicIndexOfType(type: string): number | undefined {
  const types: Record<string, TopicName> = EVENT_TYPES;
  if (!Object.hasOwn(types, type)) return undefined;
  return LIVE_TOPIC_INDEX.get(types[type] as TopicName);
}
