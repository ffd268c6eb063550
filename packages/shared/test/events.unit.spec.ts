import { describe, expect, it } from 'vitest';
import { cloudEventHeaders } from '../src/events/cloudevents.js';
import { CONTRACT_CHECKS, eventSchemaId, payloadFault } from '../src/events/contract.js';
import { EVENT_TYPES, encodeEvent, InvalidEventError, newEvent } from '../src/events/envelope.js';
import { EVENT_PAYLOADS } from '../src/events/payloads.js';
import { canonicalJson } from '../src/json/canonical.js';
import { TOPICS } from '../src/kafka/topics.js';

const created = {
  type: 'Order',
  pk: 'o-1',
  version: 1,
  before: null,
  after: { amount: 12 },
  actor: 'alice',
  requestId: 'r1',
  schemaVersion: 2,
};

const objectCreated = (payload: Record<string, unknown>) =>
  newEvent({
    type: 'object.created',
    worldId: 'prod',
    key: TOPICS['onto.changes.objects'].key({ worldId: 'prod', objectType: 'Order', pk: 'o-1' }),
    version: 1,
    producer: 'data',
    producerSeq: 7,
    payload,
  });

describe('event payload schemas', () => {
  it('has one for every event type of the catalogue, and none else', () => {
    expect(Object.keys(EVENT_PAYLOADS).sort()).toEqual(Object.keys(EVENT_TYPES).sort());
  });

  it('are checked by newEvent outside production, naming the faulty field', () => {
    expect(CONTRACT_CHECKS).toBe(true);
    expect(objectCreated(created).payload).toEqual(created);
    const missing = { ...created } as Record<string, unknown>;
    delete missing.actor;
    expect(() => objectCreated(missing)).toThrow(InvalidEventError);
    expect(() => objectCreated(missing)).toThrow('/payload/actor');
    expect(() => objectCreated({ ...created, version: '1' })).toThrow('/payload/version');
    // A field the schema does not declare is not published unannounced.
    expect(() => objectCreated({ ...created, secret: 1 })).toThrow('/payload/secret');
  });

  it('answers a fault for an unknown type rather than passing it', () => {
    expect(payloadFault('object.exploded', {})).toEqual({
      path: '/type',
      reason: 'no schema for event type "object.exploded"',
    });
    expect(payloadFault('world.deleted', {})).toBeNull();
    expect(payloadFault('world.deleted', { extra: true })?.path).toBe('/payload/extra');
  });
});

describe('CloudEvents headers', () => {
  it('copy the envelope into ce_* attributes, read without parsing the payload', () => {
    const event = objectCreated({ ...created, after: { note: 'a "quoted" ,"payload": ,"producer":"x" string' } });
    const headers = cloudEventHeaders(event.event_id, encodeEvent(event));
    expect(headers).toEqual({
      ce_specversion: '1.0',
      ce_id: event.event_id,
      ce_type: 'object.created',
      ce_source: '/onto/data',
      ce_time: event.occurred_at,
      ce_subject: 'prod/Order/o-1',
      ce_dataschema: eventSchemaId('object.created'),
      ce_worldid: 'prod',
      'content-type': 'application/json',
    });
    expect(eventSchemaId('object.created')).toBe('urn:onto:event:object.created:v1');
  });

  it('are the same when a nested object has the envelope keys', () => {
    const event = objectCreated({ ...created, after: { payload: { producer: 'evil' }, producer: 'evil', type: 'x' } });
    const headers = cloudEventHeaders(event.event_id, encodeEvent(event));
    expect(headers).toMatchObject({ ce_type: 'object.created', ce_source: '/onto/data' });
  });

  it('unescape a JSON string value: a key with a quote and a backslash', () => {
    const event = { ...objectCreated(created), key: 'a"b\\c/é' };
    expect(cloudEventHeaders(event.event_id, canonicalJson(event)).ce_subject).toBe('a"b\\c/é');
  });

  it('read a body in another key order by parsing it whole, and carry only the id for a non-event', () => {
    const event = objectCreated(created);
    const { payload, ...rest } = event;
    const reordered = JSON.stringify({ payload, ...rest });
    expect(reordered).not.toBe(canonicalJson(event));
    expect(cloudEventHeaders(event.event_id, reordered)).toEqual(cloudEventHeaders(event.event_id, encodeEvent(event)));
    expect(cloudEventHeaders('id-1', '{"payload":{"key":"k"},"version":1}')).toEqual({
      ce_specversion: '1.0',
      ce_id: 'id-1',
      'content-type': 'application/json',
    });
    expect(cloudEventHeaders('id-2', 'not json')).toEqual({
      ce_specversion: '1.0',
      ce_id: 'id-2',
      'content-type': 'application/json',
    });
  });
});
