/**
 * Typed event handlers (docs/adr/0052): a consumer registers a handler per event type and gets
 * the event with its payload typed from the catalogue's TypeBox schema (events/), instead
 * of casting `payload as {…}`. Consumed envelopes are checked against those schemas on decode
 * (validateEvent) wherever the producers check theirs, so the type states what arrives.
 */
import type { Static } from '@sinclair/typebox';
import type { EventEnvelope, EventType } from '../events/envelope.js';
import { EVENT_PAYLOADS } from '../events/payloads.js';

/** The payload of events of `T`, as its schema in the catalogue says. */
export type EventPayload<T extends EventType> = Static<(typeof EVENT_PAYLOADS)[T]>;

/** An envelope of type `T` with its payload typed. */
export type EventOf<T extends EventType> = Omit<EventEnvelope, 'type' | 'payload'> & {
  type: T;
  payload: EventPayload<T>;
};

/** Whether `event` is of one of `types`; narrows its payload to theirs. */
export function isEvent<T extends EventType>(event: EventEnvelope, ...types: T[]): event is EventEnvelope & EventOf<T> {
  return (types as EventType[]).includes(event.type);
}

/** A handler per event type, each given its own type's events and the consumer's arguments. */
export type EventHandlers<A extends unknown[]> = {
  [T in EventType]?: (event: EventOf<T>, ...args: A) => Promise<unknown> | unknown;
};

/**
 * One function that hands each event to the handler of its type, with the arguments given
 * (a transaction, a context); answers whether a handler took it. Types without a handler are
 * left alone, as a switch without their case would.
 */
export function eventHandlers<A extends unknown[]>(
  handlers: EventHandlers<A>,
): (event: EventEnvelope, ...args: A) => Promise<boolean> {
  const known = new Set(Object.keys(EVENT_PAYLOADS));
  for (const type of Object.keys(handlers)) {
    if (!known.has(type)) throw new Error(`a handler for ${type}, which is no event type of the catalogue`);
  }
  return async (event, ...args) => {
    if (!Object.hasOwn(handlers, event.type)) return false;
    const handler = handlers[event.type] as ((event: EventEnvelope, ...args: A) => unknown) | undefined;
    if (!handler) return false;
    await handler(event, ...args);
    return true;
  };
}

/** A reading per event type, each given its own type's event: what it says, or an effect to run. */
export type EventReadings<R> = { [T in EventType]?: (event: EventOf<T>) => R };

/**
 * One function that reads each event with the reading of its type: its answer, or undefined for
 * a type without one (synchronous, unlike eventHandlers: for what a batch folds into a statement).
 */
export function eventReadings<R>(readings: EventReadings<R>): (event: EventEnvelope) => R | undefined {
  const known = new Set(Object.keys(EVENT_PAYLOADS));
  for (const type of Object.keys(readings)) {
    if (!known.has(type)) throw new Error(`a reading of ${type}, which is no event type of the catalogue`);
  }
  return (event) => {
    if (!Object.hasOwn(readings, event.type)) return undefined;
    const read = readings[event.type] as ((event: EventEnvelope) => R) | undefined;
    return read?.(event);
  };
}
