import { HttpProblem } from '../errors/problem.js';
import type { Admin } from '../kafka/broker.js';

/** Kafka's default `message.max.bytes`: what a topic is taken to accept until the broker says. */
export const DEFAULT_MAX_MESSAGE_BYTES = 1_048_588;

/**
 * Room kept in a record for what is not the event: the headers the relay adds (event id,
 * CloudEvents attributes), record and batch framing. An event within its limit always fits a
 * record batch of its own.
 */
export const RECORD_HEADROOM_BYTES = 8 * 1024;

/**
 * The largest record batch each topic accepts, as the broker said when last asked (its
 * `max.message.bytes`), by physical topic name. One per process: every Outbox checks its events
 * against it and every relay sizes its produce requests by it.
 */
class RecordLimits {
  private readonly byTopic = new Map<string, number>();

  /** Bytes a record batch to `topic` may hold. */
  batchBytes(topic: string): number {
    return this.byTopic.get(topic) ?? DEFAULT_MAX_MESSAGE_BYTES;
  }

  /** Bytes an event (body, key and headers) may have to be published to `topic`. */
  eventBytes(topic: string): number {
    return this.batchBytes(topic) - RECORD_HEADROOM_BYTES;
  }

  set(limits: Map<string, number>): void {
    for (const [topic, bytes] of limits) this.byTopic.set(topic, bytes);
  }
}

export const recordLimits = new RecordLimits();

/** Asks the broker for the topics' limits and keeps them; answers what it learned. */
export async function learnRecordLimits(admin: Admin, topics: string[]): Promise<Map<string, number>> {
  // Asking about a topic that does not exist fails the whole request.
  const existing = new Set(await admin.listTopics());
  const limits = await admin.maxMessageBytes(topics.filter((t) => existing.has(t)));
  recordLimits.set(limits);
  return limits;
}

/** An event larger than its topic accepts: the write that made it is refused (413), nothing stored. */
export class EventTooLargeError extends HttpProblem {
  constructor(
    readonly eventId: string,
    readonly topic: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      413,
      'event-too-large',
      'Payload Too Large',
      `the change event of this write would be ${bytes} bytes, over the ${limit} bytes an event may have ` +
        `(the broker's max.message.bytes of ${topic} less ${RECORD_HEADROOM_BYTES} bytes for headers): ` +
        'write smaller objects',
      { limit_bytes: limit, event_bytes: bytes },
    );
  }
}

/** Refuses an event of `bytes` bytes when `topic` does not accept it. */
export function checkEventBytes(eventId: string, topic: string, bytes: number): void {
  const limit = recordLimits.eventBytes(topic);
  if (bytes > limit) throw new EventTooLargeError(eventId, topic, bytes, limit);
}
