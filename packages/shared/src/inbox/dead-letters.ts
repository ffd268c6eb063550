import type { Broker, Headers, Producer } from '../kafka/broker.js';
import { dlqOf } from '../kafka/topics.js';

/** A record given up on, as it was read. */
export interface DeadRecord {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  headers: Headers;
  /** The record's bytes as read; the event as JSON when they are not at hand (a parked event). */
  value: Buffer | string | null;
}

/** The headers every dead letter carries besides the record's own (ADR 5, the README's topic table). */
export const DLQ_HEADERS = {
  error: 'onto-error',
  errorType: 'onto-error-type',
  errors: 'onto-errors',
  topic: 'onto-original-topic',
  partition: 'onto-original-partition',
  offset: 'onto-original-offset',
  consumer: 'onto-consumer',
} as const;

/** Longest error message a dead letter carries. */
const ERROR_MAX = 4000;

/**
 * The one writer of `<topic>.dlq`, for every consumer: the record's key, value and headers, and
 * the DLQ_HEADERS saying why, where it was read and who gave up on it.
 */
export class DeadLetters {
  private producer: Producer | undefined;

  constructor(
    private readonly broker: Broker,
    /** The consumer group giving up on records. */
    private readonly consumer: string,
  ) {}

  async start(): Promise<void> {
    this.producer = await this.broker.producer();
  }

  async stop(): Promise<void> {
    await this.producer?.disconnect();
    this.producer = undefined;
  }

  /** Sends the record to its topic's DLQ; `type` names the failure when the error's name does not. */
  async send(record: DeadRecord, error: Error, type: string = error.name): Promise<void> {
    const producer = this.producer;
    if (!producer) throw new Error('consumer is not started');
    const fields = (error as { errors?: unknown }).errors;
    const headers: Headers = {
      ...record.headers,
      [DLQ_HEADERS.error]: String(error.message ?? error).slice(0, ERROR_MAX),
      [DLQ_HEADERS.errorType]: type,
      ...(Array.isArray(fields) && fields.length > 0 ? { [DLQ_HEADERS.errors]: JSON.stringify(fields) } : {}),
      [DLQ_HEADERS.topic]: record.topic,
      [DLQ_HEADERS.partition]: String(record.partition),
      [DLQ_HEADERS.offset]: record.offset,
      [DLQ_HEADERS.consumer]: this.consumer,
    };
    await producer.send([
      { topic: dlqOf(record.topic), messages: [{ key: record.key ?? '', value: record.value ?? '', headers }] },
    ]);
  }
}
