import { dlqOf, FIXED_PARTITIONS, TOPIC_NAMES, TOPICS, type TopicName } from '../kafka/topics.js';
import { CLOUDEVENTS_SPEC_VERSION, cloudEventSource } from './cloudevents.js';
import { EVENT_SCHEMA_VERSION, eventSchemaId, producersOf, TOPIC_CONSUMERS } from './contract.js';
import { EVENT_TYPES, EventEnvelopeSchema, type EventType, PRODUCERS, type ProducerName } from './envelope.js';
import { EVENT_PAYLOADS } from './payloads.js';

/**
 * The AsyncAPI 3 document of onto's topics (docs/adr/0020), built from the topic catalogue and
 * the event schemas: docs/asyncapi.json is this document, and each service serves the part it
 * produces at /docs/asyncapi.json.
 */

type Json = Record<string, unknown>;
const KAFKA_BINDING = '0.5.0';

/** A TypeBox schema as plain JSON Schema (its symbols dropped). */
const plain = (schema: unknown): Json => JSON.parse(JSON.stringify(schema));

/** The fields a topic's partition key is made of, in order, read from the catalogue's key function. */
export function keyParts(topic: TopicName): string[] {
  const parts: string[] = [];
  const probe = new Proxy(
    {},
    {
      get: (_target, name) => {
        parts.push(String(name));
        return String(name);
      },
    },
  );
  (TOPICS[topic].key as (p: never) => string)(probe as never);
  return parts;
}

function keySchema(topic: TopicName): Json {
  const parts = keyParts(topic);
  return {
    type: 'string',
    description: `${parts.map((p) => `{${p}}`).join('/')}, each part URI-encoded (encodeURIComponent): one ${parts.at(-1)}'s events share a partition and keep their order`,
  };
}

/** A W3C traceparent of version 00 (https://www.w3.org/TR/trace-context/#traceparent-header). */
export const TRACEPARENT_PATTERN = '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$';

/** A string of one value, or of one of several. */
const oneOf = (values: readonly string[]): Json => (values.length === 1 ? { const: values[0] } : { enum: [...values] });

function eventHeaders(type: EventType, producers: readonly ProducerName[]): Json {
  const text = (description: string, extra: Json = {}) => ({ type: 'string', description, ...extra });
  return {
    type: 'object',
    required: [
      'onto-event-id',
      'ce_specversion',
      'ce_id',
      'ce_type',
      'ce_source',
      'ce_time',
      'ce_subject',
      'ce_dataschema',
      'content-type',
    ],
    properties: {
      'onto-event-id': text('the envelope event_id: deduplicate by it'),
      'x-request-id': text('the HTTP request that caused the event, when one did'),
      'x-caused-by': text(
        "the event the request's client named as its cause (X-Caused-By), when it did: for tracing, never waited for",
      ),
      traceparent: text(
        'W3C trace context of the span that sent the record (CloudEvents distributed-tracing extension), ' +
          'a child of the request or applied record that caused the event; present when its producer traces',
        { pattern: TRACEPARENT_PATTERN },
      ),
      ce_specversion: text('CloudEvents spec version', { const: CLOUDEVENTS_SPEC_VERSION }),
      ce_id: text('CloudEvents id: the envelope event_id'),
      ce_type: text('CloudEvents type: the envelope type', { const: type }),
      ce_source: text('CloudEvents source: the producing service', oneOf(producers.map(cloudEventSource))),
      ce_time: text('CloudEvents time: the envelope occurred_at'),
      ce_subject: text('CloudEvents subject: the envelope key'),
      ce_dataschema: text("the id of the event's schema and version", { const: eventSchemaId(type) }),
      ce_worldid: text('CloudEvents extension: the envelope world_id'),
      'content-type': text('the value is JSON', { const: 'application/json' }),
    },
  };
}

/** The JSON Schema of one event type's record value: the envelope with its type and payload. */
export function eventSchema(type: EventType): Json {
  const envelope = plain(EventEnvelopeSchema);
  const properties = envelope.properties as Json;
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    $id: eventSchemaId(type),
    ...envelope,
    description: plain(EVENT_PAYLOADS[type]).description ?? type,
    properties: {
      ...properties,
      type: { type: 'string', const: type },
      producer: { type: 'string', ...oneOf(producersOf(type, EVENT_TYPES[type])) },
      payload: plain(EVENT_PAYLOADS[type]),
    },
  };
}

const DEAD_LETTER = {
  name: 'dead-letter',
  title: 'A record a consumer could not apply',
  contentType: 'application/json',
  summary: 'The original record (value, key, headers), with why and where it was refused',
  headers: {
    type: 'object',
    properties: {
      'onto-error': { type: 'string' },
      'onto-error-type': { type: 'string' },
      'onto-original-topic': { type: 'string' },
      'onto-original-partition': { type: 'string' },
      'onto-original-offset': { type: 'string' },
      'onto-consumer': { type: 'string' },
    },
  },
  payload: { description: "the original record's value, as it was (it may not be an event)" },
};

const typesOf = (topic: TopicName) => (Object.keys(EVENT_TYPES) as EventType[]).filter((t) => EVENT_TYPES[t] === topic);
const channelRef = (channel: string) => ({ $ref: `#/channels/${channel}` });
const tagRef = (service: string) => ({ $ref: `#/components/tags/${service}` });

/** The document of every topic, or of those `service` produces (its events, and the dead letters it writes). */
export function asyncApiDocument(service?: ProducerName): Json {
  const channels: Json = {};
  const operations: Json = {};
  const messages: Json = {};
  let deadLetters = false;
  for (const topic of TOPIC_NAMES) {
    const owner = TOPICS[topic].producer as ProducerName;
    const consumers = TOPIC_CONSUMERS[topic];
    const types = typesOf(topic);
    const producers = [...new Set(types.flatMap((t) => producersOf(t, topic)))];
    if (!service || producers.includes(service)) {
      channels[topic] = {
        address: topic,
        title: topic,
        description: `Produced by ${producers.join(' and ')} (owner ${owner}); consumed by ${consumers.map((c) => `${c.service} (group ${c.group})`).join(', ') || 'no onto service'}. Key: ${keySchema(topic).description}.`,
        messages: Object.fromEntries(types.map((t) => [t, { $ref: `#/components/messages/${t}` }])),
        bindings: {
          kafka: {
            topic,
            ...(FIXED_PARTITIONS[topic] ? { partitions: FIXED_PARTITIONS[topic] } : {}),
            bindingVersion: KAFKA_BINDING,
          },
        },
      };
      for (const t of types) {
        messages[t] = {
          name: t,
          title: t,
          summary: plain(EVENT_PAYLOADS[t]).description ?? t,
          contentType: 'application/json',
          headers: eventHeaders(t, producersOf(t, topic)),
          payload: eventSchema(t),
          bindings: { kafka: { key: keySchema(topic), bindingVersion: KAFKA_BINDING } },
          'x-onto-schema-version': EVENT_SCHEMA_VERSION,
        };
      }
      for (const producer of producers.filter((p) => !service || p === service)) {
        operations[`${producer}.send.${topic}`] = {
          action: 'send',
          title: `${producer} publishes on ${topic}`,
          channel: channelRef(topic),
          messages: types
            .filter((t) => producersOf(t, topic).includes(producer))
            .map((t) => ({ $ref: `#/channels/${topic}/messages/${t}` })),
          tags: [tagRef(producer)],
        };
      }
      for (const c of consumers) {
        // own-key: groups and topics are the contract's constants (TOPIC_CONSUMERS, TOPICS)
        operations[`${c.group}.receive.${topic}`] = {
          action: 'receive',
          title: `${c.service} consumes ${topic} as group ${c.group}`,
          channel: channelRef(topic),
          messages: types.map((t) => ({ $ref: `#/channels/${topic}/messages/${t}` })),
          bindings: { kafka: { groupId: { type: 'string', const: c.group }, bindingVersion: KAFKA_BINDING } },
          tags: [tagRef(c.service)],
        };
      }
    }
    // A topic's dead letters are written by its consumers.
    const writers = [...new Set(consumers.map((c) => c.service))].filter((s) => !service || s === service);
    if (writers.length === 0) continue;
    const dlq = dlqOf(topic);
    deadLetters = true;
    // own-key: a contract topic's dead-letter name, a constant
    channels[dlq] = {
      address: dlq,
      title: dlq,
      description: `Dead letters of ${topic}, written by its consumers (${writers.join(', ')}); same key as the original.`,
      messages: { 'dead-letter': { $ref: '#/components/messages/dead-letter' } },
      bindings: { kafka: { topic: dlq, bindingVersion: KAFKA_BINDING } },
    };
    for (const writer of writers) {
      // own-key: a contract service and dead-letter topic, constants
      operations[`${writer}.send.${dlq}`] = {
        action: 'send',
        title: `${writer} dead-letters what it cannot apply from ${topic}`,
        channel: channelRef(dlq),
        messages: [{ $ref: `#/channels/${dlq}/messages/dead-letter` }],
        tags: [tagRef(writer)],
      };
    }
  }
  if (deadLetters) messages['dead-letter'] = DEAD_LETTER;
  return {
    asyncapi: '3.0.0',
    info: {
      title: service ? `onto ${service} events` : 'onto events',
      version: `${EVENT_SCHEMA_VERSION}.0.0`,
      description:
        'The topics of onto, their keys, headers and events. Every record is a JSON event envelope (its value) ' +
        'with CloudEvents attributes in ce_* headers (Kafka protocol binding, binary content mode). ' +
        'Delivery is at least once: deduplicate by event_id. See docs/consumers.md and docs/adr/0020-event-contract.md.',
    },
    defaultContentType: 'application/json',
    servers: {
      local: { host: '127.0.0.1:9092', protocol: 'kafka', description: 'the broker of a local stack (./onto up)' },
    },
    channels,
    operations,
    components: {
      messages,
      tags: Object.fromEntries(PRODUCERS.map((name) => [name, { name, description: `the ${name} service` }])),
    },
  };
}
