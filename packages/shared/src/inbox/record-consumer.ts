import type { Logger } from 'pino';
import type { Broker, Consumer, IncomingBatch, IncomingMessage } from '../kafka/broker.js';
import { DeadLetters } from './dead-letters.js';

export interface RecordConsumerOptions {
  /** Consumer group id. */
  name: string;
  /** Physical topic names (with any prefix). */
  topics: string[];
  broker: Broker;
  logger: Logger;
  /**
   * Applies one record in its own transaction. It must recognise a redelivery itself (there is
   * no inbox: these records are not onto's events and carry no event id).
   */
  handle: (record: IncomingMessage) => Promise<void>;
  /**
   * Whether an error is the record's fault: such a record is dead-lettered and the partition goes
   * on. Any other error fails the batch, which is consumed again from its last committed offset.
   */
  isRefusal: (error: unknown) => boolean;
  /** Longest a fetch waits for records. */
  maxWaitTimeMs?: number;
}

/**
 * A consumer of records that are not onto's event envelopes (CDC's Debezium change events): each
 * record goes to `handle` in partition order; offsets are committed once the batch is handled;
 * refusals go to the DLQ through the same writer, with the same headers, as the inbox's.
 */
export class RecordConsumer {
  private consumer: Consumer | undefined;
  private readonly deadLetters: DeadLetters;
  private readonly log: Logger;

  constructor(private readonly opts: RecordConsumerOptions) {
    this.deadLetters = new DeadLetters(opts.broker, opts.name);
    this.log = opts.logger.child({ component: 'record-consumer', consumer: opts.name });
  }

  async start(): Promise<void> {
    await this.deadLetters.start();
    this.consumer = await this.opts.broker.consumer({
      groupId: this.opts.name,
      topics: this.opts.topics,
      fromBeginning: true,
      ...(this.opts.maxWaitTimeMs ? { maxWaitTimeMs: this.opts.maxWaitTimeMs } : {}),
    });
    await this.consumer.run((batch) => this.handleBatch(batch));
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect();
    await this.deadLetters.stop();
    this.consumer = undefined;
  }

  private async handleBatch(batch: IncomingBatch): Promise<void> {
    for (const record of batch.messages) {
      if (!batch.isRunning() || batch.isStale()) return;
      try {
        await this.opts.handle(record);
      } catch (error) {
        if (!this.opts.isRefusal(error)) throw error;
        const { topic, partition, offset, key, headers, value } = record; // read, not spread: headers is a getter
        await this.deadLetters.send({ topic, partition, offset, key, headers, value }, error as Error);
        this.log.warn({ topic, partition, offset, err: error }, 'record dead-lettered');
      }
      await batch.heartbeat();
    }
  }
}
