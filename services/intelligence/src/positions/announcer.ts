import { inTransaction, newEvent, Outbox, runPeriodically, TOPICS } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';

interface Position {
  schemaVersion: number;
  dataSeq: number;
}

/**
 * Announces intelligence's position per world, `intelligence.position` `{ schemaVersion, dataSeq }`
 * on onto.intelligence, for control's version vector (docs/adr/0025): the schema version its
 * replica applied and its data watermark. A periodic task reading the watermark and schema tables,
 * not the applying transaction: the hot consumer path stays as it is. Each tick reads the worlds
 * whose watermark or schema changed since the previous read (less one interval, which catches an
 * applying transaction that started before that read and committed after it) and announces those
 * whose position moved past what this process announced last.
 */
export class PositionAnnouncer {
  private since: Date | undefined;
  private readonly announced = new Map<string, Position>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly topicPrefix: string,
    private readonly intervalMs: number,
  ) {}

  /** One announcement round; answers the worlds announced. */
  async tick(): Promise<Map<string, Position>> {
    const { rows } = await this.pool.query<{ world: string; schemaVersion: number; dataSeq: string; readAt: Date }>(
      `WITH changed AS (
         SELECT world_id FROM data_watermarks WHERE updated_at > $1
         UNION SELECT world_id FROM schema_versions WHERE received_at > $1
       )
       SELECT c.world_id AS world,
              (SELECT coalesce(max(version), 0) FROM schema_versions s WHERE s.world_id = c.world_id) AS "schemaVersion",
              coalesce((SELECT seq FROM data_watermarks d WHERE d.world_id = c.world_id), 0)::text AS "dataSeq",
              transaction_timestamp() AS "readAt"
         FROM changed c`,
      [this.since ? new Date(this.since.getTime() - this.intervalMs) : '-infinity'],
    );
    const fresh = new Map<string, Position>();
    for (const row of rows) {
      const position = { schemaVersion: row.schemaVersion, dataSeq: Number(row.dataSeq) };
      const last = this.announced.get(row.world);
      if (!last || position.schemaVersion > last.schemaVersion || position.dataSeq > last.dataSeq) {
        fresh.set(row.world, position);
      }
    }
    if (rows[0]) this.since = rows[0].readAt;
    else if (this.since === undefined) this.since = new Date(Date.now() - this.intervalMs);
    if (fresh.size === 0) return fresh;
    await inTransaction(this.pool, (tx) =>
      new Outbox(tx, this.topicPrefix).add(
        [...fresh].map(([worldId, position]) => ({
          event: newEvent({
            type: 'intelligence.position',
            worldId,
            key: worldId,
            version: position.dataSeq,
            producer: 'intelligence',
            producerSeq: position.dataSeq,
            payload: { ...position },
          }),
          key: TOPICS['onto.intelligence'].key({ worldId }),
        })),
      ),
    );
    for (const [world, position] of fresh) this.announced.set(world, position);
    return fresh;
  }
}

/** intelligence's side of the version vector: `intelligence.position` per world, at most once per interval. */
export default fp(
  async (app: FastifyInstance, opts: { intervalMs: number }) => {
    const announcer = new PositionAnnouncer(app.pg, app.topicPrefix, opts.intervalMs);
    runPeriodically(app, 'announcing intelligence positions', opts.intervalMs, () => announcer.tick());
  },
  { name: 'onto-intelligence-positions' },
);
