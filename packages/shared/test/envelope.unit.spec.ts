import { describe, expect, it } from 'vitest';
import { encodeEvent, InvalidEventError, newEvent, parseEvent, validateEvent } from '../src/events/envelope.js';
import { UUID_V7, uuidv7 } from '../src/ids/uuidv7.js';
import { canonicalJson } from '../src/json/canonical.js';
import { TOPICS } from '../src/kafka/topics.js';

const base = () =>
  newEvent({
    type: 'object.updated',
    worldId: 'prod',
    key: 'order/42',
    version: 3,
    producer: 'data',
    producerSeq: 17,
    payload: {
      type: 'Order',
      pk: '42',
      version: 3,
      before: { amount: 10 },
      after: { amount: 12 },
      actor: 'alice',
      requestId: 'r1',
      schemaVersion: 1,
    },
  }) as unknown as Record<string, unknown>;

describe('canonical JSON', () => {
  it('sorts keys at every depth, has no spaces and keeps non-ASCII', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: '北京 €' } })).toBe(
      '{"a":{"c":"北京 €","d":[3,{"y":2,"z":1}]},"b":1}',
    );
  });
  it('is the same for equal values built in different orders', () => {
    expect(canonicalJson({ x: 1, y: [1, 2] })).toBe(canonicalJson({ y: [1, 2], x: 1 }));
  });
  it('refuses what JSON cannot carry', () => {
    expect(() => canonicalJson({ a: Number.NaN })).toThrow(/\$\.a/);
    expect(() => canonicalJson({ a: 1n })).toThrow(/bigint/);
    expect(() => canonicalJson([() => 1])).toThrow(/function/);
  });
});

describe('UUIDv7', () => {
  it('has the v7 layout and increases within one millisecond', () => {
    const ids = Array.from({ length: 5000 }, () => uuidv7(1_700_000_000_000));
    for (const id of ids) expect(id).toMatch(UUID_V7);
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });
  it('carries its millisecond timestamp', () => {
    const id = uuidv7(Date.UTC(2030, 0, 1));
    expect(Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16)).toBeGreaterThanOrEqual(Date.UTC(2030, 0, 1));
  });
});

describe('event envelope', () => {
  it('round-trips through its canonical encoding', () => {
    const event = base();
    expect(parseEvent(encodeEvent(event as never))).toEqual(event);
    expect(encodeEvent(event as never)).toMatch(/^\{"causal_order":0,"caused_by":null,"event_id":/);
  });

  it.each([
    ['/event_id', { event_id: '' }],
    ['/event_id', { event_id: 42 }],
    ['/event_id', { event_id: '0190a000-0000-4000-8000-000000000000' }], // a v4, not a v7
    ['/world_id', { world_id: '' }],
    ['/world_id', { world_id: 'Prod' }],
    ['/key', { key: '' }],
    ['/key', { key: 7 }],
    ['/version', { version: -1 }],
    ['/version', { version: 1.5 }],
    ['/version', { version: true }],
    ['/version', { version: '3' }],
    ['/causal_order', { causal_order: false }],
    ['/producer_seq', { producer_seq: 2.25 }],
    ['/caused_by', { caused_by: '' }],
    ['/type', { type: 'object.teleported' }],
    ['/type', { type: 12 }],
    ['/producer', { producer: 'someone' }],
    ['/occurred_at', { occurred_at: 'yesterday' }],
    ['/payload', { payload: [1, 2] }],
    ['/extra', { extra: 1 }],
  ])('refuses a bad %s, naming it', (path, override) => {
    const attempt = () => validateEvent({ ...base(), ...override });
    expect(attempt).toThrow(InvalidEventError);
    try {
      attempt();
    } catch (error) {
      expect((error as InvalidEventError).path).toBe(path);
      expect((error as Error).message).toContain(path);
    }
  });

  it('refuses missing fields and bodies that are not JSON objects', () => {
    const { version: _, ...rest } = base();
    expect(() => validateEvent(rest)).toThrow(/\/version/);
    expect(() => parseEvent('not json')).toThrow(/is not JSON/);
    expect(() => parseEvent('[1]')).toThrow(/must be an object/);
    expect(() => parseEvent(null)).toThrow(/no value/);
  });
});

describe('topic catalog', () => {
  it('builds each topic key from the parts the design names', () => {
    expect(TOPICS['onto.changes.objects'].key({ worldId: 'prod', objectType: 'order', pk: 'a/b c' })).toBe(
      'prod/order/a%2Fb%20c',
    );
    expect(TOPICS['domain.alerts'].key({ worldId: 'prod', alertType: 'late' })).toBe('prod/late');
    expect(TOPICS['domain.actions'].key({ worldId: 'dev-1', actionId: 'x' })).toBe('dev-1/x');
    expect(TOPICS['onto.identity'].key({ userId: 'u1' })).toBe('u1');
  });
});
