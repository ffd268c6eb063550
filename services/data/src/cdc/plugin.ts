import type { Consumer, IncomingMessage, Producer } from '@onto/shared';
import { withTimeout } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import { applyChange, CdcRefusal } from './apply.js';
import { type CdcMapping, cdcTopic, parseMappings, parseRecord } from './mapping.js';

/**
 * The CDC consumer: Debezium change events on `<prefix>cdc.raw.<source>` become objects through
 * `CDC_MAPPINGS`. Not the kernel's InboxConsumer (these records are not our envelope): each record
 * is applied in its own transaction guarded by the object's last applied source position
 * (cdc_positions), so redeliveries and older changes arriving late are skipped; offsets are
 * committed after the transactions. A record the mapping or the schema refuses goes to
 * `<topic>.dlq` with the error and the partition continues; any other failure (PostgreSQL, Kafka)
 * fails the batch, which is redelivered from the last committed offset.
 */
export default async function cdc(app: FastifyInstance, opts: { mappings: string }) {
  const mappings = parseMappings(opts.mappings);
  if (mappings.length === 0) return;
  const byTopic = new Map<string, CdcMapping>(mappings.map((m) => [`${app.topicPrefix}${cdcTopic(m.source)}`, m]));
  let consumer: Consumer | undefined;
  let producer: Producer | undefined;
  let closing = false;
  let starting: Promise<void> | undefined;

  const deadLetter = async (record: IncomingMessage, error: unknown) => {
    producer ??= await app.broker.producer();
    const refusal = error instanceof CdcRefusal ? error : undefined;
    await producer.send([
      {
        topic: `${record.topic}.dlq`,
        messages: [
          {
            key: record.key ?? '',
            value: record.value ?? '',
            headers: {
              ...record.headers,
              'x-dlq-error': (error as Error).message ?? String(error),
              ...(refusal && refusal.errors.length > 0 ? { 'x-dlq-errors': JSON.stringify(refusal.errors) } : {}),
              'x-dlq-topic': record.topic,
              'x-dlq-partition': String(record.partition),
              'x-dlq-offset': record.offset,
            },
          },
        ],
      },
    ]);
    app.log.warn(
      { topic: record.topic, partition: record.partition, offset: record.offset, err: error },
      'CDC record dead-lettered',
    );
  };

  const start = async () => {
    const c = await app.broker.consumer({
      groupId: `${app.topicPrefix}data-cdc`,
      topics: [...byTopic.keys()],
      fromBeginning: true,
      maxWaitTimeMs: 100,
    });
    consumer = c;
    await c.run(async (batch) => {
      const mapping = byTopic.get(batch.topic);
      if (!mapping) return;
      for (const record of batch.messages) {
        if (!batch.isRunning() || batch.isStale()) return;
        try {
          const change = (() => {
            try {
              return parseRecord(record.value);
            } catch (e) {
              throw new CdcRefusal(`not a change event: ${(e as Error).message}`);
            }
          })();
          if (change) await applyChange(app, mapping, change, record);
        } catch (error) {
          if (!(error instanceof CdcRefusal)) throw error;
          await deadLetter(record, error);
        }
        await batch.heartbeat();
      }
    });
  };

  app.addHook('onReady', async () => {
    // In the background, retrying (the topics may not exist yet, Kafka may be away): a service
    // boots without its CDC sources.
    starting = (async () => {
      for (let attempt = 0; !closing; attempt++) {
        try {
          await start();
          return;
        } catch (err) {
          app.log.warn({ err, attempt }, 'CDC consumer could not start; retrying');
          await consumer?.disconnect().catch(() => {});
          consumer = undefined;
          await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** attempt, 5000)));
        }
      }
    })();
  });
  app.addHook('onClose', async () => {
    closing = true;
    await withTimeout(starting ?? Promise.resolve(), 500, 'CDC consumer start in progress').catch(() => {});
    await withTimeout(
      Promise.all([consumer?.disconnect(), producer?.disconnect()]),
      5000,
      'CDC consumer did not stop in time',
    ).catch((err) => app.log.warn({ err }, 'closing without waiting for the CDC consumer'));
  });
}
