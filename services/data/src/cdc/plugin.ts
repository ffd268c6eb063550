import type { FastifyInstance } from 'fastify';
import { applyChange, CdcRefusal } from './apply.js';
import { type CdcMapping, cdcTopic, parseMappings, parseRecord } from './mapping.js';

/**
 * The CDC consumer: Debezium change events on `<prefix>cdc.raw.<source>` become objects through
 * `CDC_MAPPINGS`. A record consumer of the service's (`addConsumer`), not an inbox one: these
 * records are not our envelope. Each record is applied in its own transaction guarded by the
 * object's last applied source position (cdc_positions), so redeliveries and older changes
 * arriving late are skipped; offsets are committed after the transactions. A record the mapping
 * or the schema refuses goes to `<topic>.dlq` with the error and the partition continues; any
 * other failure (PostgreSQL, Kafka) fails the batch, which is redelivered from the last committed
 * offset.
 */
export default async function cdc(app: FastifyInstance, opts: { mappings: string }) {
  const mappings = parseMappings(opts.mappings);
  if (mappings.length === 0) return;
  const byTopic = new Map<string, CdcMapping>(mappings.map((m) => [`${app.topicPrefix}${cdcTopic(m.source)}`, m]));
  app.addConsumer({
    name: 'data-cdc',
    topics: mappings.map((m) => cdcTopic(m.source)),
    maxWaitTimeMs: 100,
    isRefusal: (error) => error instanceof CdcRefusal,
    handle: async (record) => {
      const mapping = byTopic.get(record.topic);
      if (!mapping) return;
      const change = (() => {
        try {
          return parseRecord(record.value);
        } catch (e) {
          throw new CdcRefusal(`not a change event: ${(e as Error).message}`);
        }
      })();
      if (change) await applyChange(app, mapping, change, record);
    },
  });
}
