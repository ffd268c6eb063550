import { eventSchemaId } from './contract.js';

/**
 * CloudEvents attributes of a record, in the binary content mode of the Kafka protocol binding
 * (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/bindings/kafka-protocol-binding.md):
 * the envelope stays the record's value, its attributes are copied into `ce_*` headers.
 */
export const CLOUDEVENTS_SPEC_VERSION = '1.0';

/** The CloudEvents `source` of an event: the service that produced it. */
export const cloudEventSource = (producer: string) => `/onto/${producer}`;

interface EnvelopeHead {
  key?: unknown;
  occurred_at?: unknown;
  producer?: unknown;
  type?: unknown;
  world_id?: unknown;
}

/**
 * The envelope fields the headers need, read from its canonical JSON (keys sorted) without
 * parsing the payload: the fields before it are flat, and so are the ones after it, from
 * `"producer"` on. A quote inside a JSON string is escaped, so `,"payload":` and `,"producer":"`
 * appear unescaped only as the envelope's own keys. Any other body is parsed whole.
 */
function envelopeHead(body: string): EnvelopeHead {
  const payload = body.indexOf(',"payload":');
  const producer = body.lastIndexOf(',"producer":"');
  try {
    if (body.startsWith('{"causal_order":') && payload > 0 && producer > payload) {
      return { ...JSON.parse(`${body.slice(0, payload)}}`), ...JSON.parse(`{${body.slice(producer + 1)}`) };
    }
    const parsed: unknown = JSON.parse(body);
    return parsed !== null && typeof parsed === 'object' ? (parsed as EnvelopeHead) : {};
  } catch {
    return {};
  }
}

/**
 * The `ce_*` headers and content type of an event record. A body that is not an envelope (only
 * tests of the relay send such) gets the attributes it has: id, spec version, content type.
 */
export function cloudEventHeaders(eventId: string, body: string): Record<string, string> {
  const head = envelopeHead(body);
  const headers: Record<string, string> = {
    ce_specversion: CLOUDEVENTS_SPEC_VERSION,
    ce_id: eventId,
    'content-type': 'application/json',
  };
  if (typeof head.type === 'string') {
    headers.ce_type = head.type;
    headers.ce_dataschema = eventSchemaId(head.type);
  }
  if (typeof head.producer === 'string') headers.ce_source = cloudEventSource(head.producer);
  if (typeof head.occurred_at === 'string') headers.ce_time = head.occurred_at;
  if (typeof head.key === 'string') headers.ce_subject = head.key;
  if (typeof head.world_id === 'string') headers.ce_worldid = head.world_id;
  return headers;
}
