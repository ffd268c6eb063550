import { describe, expect, it } from 'vitest';
import { newEvent } from '../src/events/envelope.js';
import { eventHandlers, eventReadings, isEvent } from '../src/inbox/handlers.js';

const merge = '0190a5a0-0000-7000-8000-000000000001';
const event = (type: 'world.merge.compensate' | 'storage.position', payload: Record<string, unknown>) =>
  newEvent({ type, worldId: 'w1', key: 'w1', version: 0, producer: 'control', producerSeq: 0, payload });

describe('typed event handlers', () => {
  it('hands each event to the handler of its type, with the arguments given', async () => {
    const seen: string[] = [];
    const handle = eventHandlers<[string]>({
      'world.merge.compensate': (e, tx) => {
        // The payload is typed from the catalogue: no cast, `reason` is a string.
        seen.push(`${tx}:${e.payload.merge}:${e.payload.reason.toUpperCase()}`);
      },
    });
    expect(await handle(event('world.merge.compensate', { merge, reason: 'failed' }), 'tx1')).toBe(true);
    expect(await handle(event('storage.position', { seq: 3 }), 'tx2')).toBe(false);
    expect(seen).toEqual([`tx1:${merge}:FAILED`]);
  });

  it('refuses a handler for a type the catalogue does not have', () => {
    expect(() => eventHandlers({ 'no.such.event': async () => {} } as never)).toThrow(/no event type of the catalogue/);
    expect(() => eventReadings({ constructor: () => 1 } as never)).toThrow(/no event type/);
  });

  it('reads an event with the reading of its type; undefined for others', () => {
    const seq = eventReadings<number>({ 'storage.position': (e) => e.payload.seq });
    expect(seq(event('storage.position', { seq: 7 }))).toBe(7);
    expect(seq(event('world.merge.compensate', { merge, reason: 'x' }))).toBeUndefined();
  });

  it('narrows an envelope to the types named', () => {
    const e = event('storage.position', { seq: 2 });
    expect(isEvent(e, 'storage.position') && e.payload.seq).toBe(2);
    expect(isEvent(e, 'world.merge.compensate', 'world.merge.apply')).toBe(false);
  });
});
