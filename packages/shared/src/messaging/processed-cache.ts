import type { Redis } from 'ioredis';

/**
 * Redis as the fast path of the inbox: `done` is written only after the effect committed, so a
 * `done` answer safely skips an event without touching PostgreSQL. Anything else — a new id, a
 * `pending` left by a crash, Redis unreachable — sends the event to the PostgreSQL inbox, which
 * is the record that decides.
 */
export class ProcessedCache {
  /** Which database's inbox the markers speak for; unset, the cache answers nothing. */
  private scope: string | undefined;

  constructor(
    private readonly redis: Redis | undefined,
    private readonly consumer: string,
    private readonly ttlSeconds: number,
    private readonly onUnavailable: (error: Error) => void,
  ) {}

  /**
   * Binds the markers to one database (its inbox epoch and oid, see kernel migration 003): a
   * database recreated or restored must never trust another's "done".
   */
  async bind(db: { query: (text: string) => Promise<{ rows: { scope: string }[] }> }): Promise<void> {
    const { rows } = await db.query(
      `SELECT m.inbox_epoch::text || '-' || d.oid::text AS scope
         FROM kernel_meta m, pg_database d WHERE d.datname = current_database()`,
    );
    this.scope = rows[0]?.scope;
  }

  private key(eventId: string) {
    return `onto:inbox:${this.scope}:${this.consumer}:${eventId}`;
  }

  /** Registers the ids (SET NX, pipelined) and returns those already done. */
  async claim(eventIds: string[]): Promise<Set<string>> {
    const done = new Set<string>();
    if (!this.redis || !this.scope || eventIds.length === 0) return done;
    try {
      const pipeline = this.redis.pipeline();
      for (const id of eventIds) pipeline.set(this.key(id), 'pending', 'EX', this.ttlSeconds, 'NX', 'GET');
      const results = (await pipeline.exec()) ?? [];
      results.forEach(([error, value], i) => {
        if (error) throw error;
        if (value === 'done') done.add(eventIds[i] as string);
      });
    } catch (error) {
      this.onUnavailable(error as Error);
      done.clear();
    }
    return done;
  }

  async markDone(eventIds: string[]): Promise<void> {
    if (!this.redis || !this.scope || eventIds.length === 0) return;
    try {
      const pipeline = this.redis.pipeline();
      for (const id of eventIds) pipeline.set(this.key(id), 'done', 'EX', this.ttlSeconds);
      await pipeline.exec();
    } catch (error) {
      this.onUnavailable(error as Error);
    }
  }
}
