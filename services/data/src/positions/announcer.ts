import { inTransaction, newEvent, Outbox, outboxPositions, physicalTopic, TOPICS } from '@onto/shared';
import type pg from 'pg';

/** How many of the newest outbox rows a fresh announcer reads, so a restart misses no recent write. */
const RESTART_LOOKBACK_ROWS = 10_000;

/**
 * Announces data's position per world, `storage.position` `{ seq }` on onto.storage: the newest
 * write sequence among the world's change events, for control's version vector (docs/adr/0025).
 * A periodic task, not the write path: a write costs nothing more (docs/adr/0013). Each tick
 * reads `data_seq`; when it moved, it asks the kernel for the newest seq per world among the change
 * events the outbox gained since the tick before last (an id range of its primary key — the one-tick overlap catches a transaction that
 * took its outbox id before the previous read and committed after it) and announces each world
 * whose newest seq passed what this process announced last. Idle, a tick is one cheap query.
 */
export class PositionAnnouncer {
  private lastSeq: number | undefined;
  private readFrom: number | undefined;
  private previousTop = 0;
  private settled = false;
  private readonly announced = new Map<string, number>();
  private readonly changeTopics: string[];

  constructor(
    private readonly pool: pg.Pool,
    private readonly topicPrefix: string,
  ) {
    this.changeTopics = [
      physicalTopic(topicPrefix, 'onto.changes.objects'),
      physicalTopic(topicPrefix, 'onto.changes.links'),
    ];
  }

  /** One announcement round; answers the worlds announced. */
  async tick(): Promise<Map<string, number>> {
    const { rows } = await this.pool.query<{ seq: string; top: string }>(
      `SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM data_seq)::text AS seq,
              (SELECT coalesce(max(id), 0) FROM outbox)::text AS top`,
    );
    const seq = Number(rows[0]?.seq ?? 0);
    const top = Number(rows[0]?.top ?? 0);
    if (this.readFrom === undefined) {
      this.readFrom = Math.max(0, top - RESTART_LOOKBACK_ROWS);
      this.previousTop = this.readFrom;
    }
    // Nothing written since the last tick, and the overlap already re-read the tick before: done.
    if (seq === this.lastSeq && this.settled) return new Map();
    this.settled = seq === this.lastSeq;
    this.lastSeq = seq;
    const from = this.readFrom;
    this.readFrom = this.previousTop;
    this.previousTop = top;
    const positions = await outboxPositions(this.pool, from, top, this.changeTopics);
    const fresh = new Map<string, number>();
    for (const [world, worldSeq] of positions) {
      if (worldSeq > (this.announced.get(world) ?? 0)) fresh.set(world, worldSeq);
    }
    if (fresh.size === 0) return fresh;
    await inTransaction(this.pool, (tx) =>
      new Outbox(tx, this.topicPrefix).add(
        [...fresh].map(([worldId, worldSeq]) => ({
          event: newEvent({
            type: 'storage.position',
            worldId,
            key: worldId,
            version: worldSeq,
            producer: 'data',
            producerSeq: worldSeq,
            payload: { seq: worldSeq },
          }),
          key: TOPICS['onto.storage'].key({ worldId }),
        })),
      ),
    );
    for (const [world, worldSeq] of fresh) this.announced.set(world, worldSeq);
    return fresh;
  }
}
