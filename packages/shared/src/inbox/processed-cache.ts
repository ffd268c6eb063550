import type { Redis } from 'ioredis';

/** Longest a `done` marker waits for a claim to travel with. */
const DONE_FLUSH_MS = 100;

/**
 * Redis as the fast path of the inbox: `done` is written only after the effect committed, so a
 * `done` answer safely skips an event without touching PostgreSQL. Anything else — a new id, a
 * `pending` left by a crash, Redis unreachable — sends the event to the PostgreSQL inbox, which
 * is the record that decides.
 *
 * `done` markers travel with the next claim, ahead of it in the same pipeline (so a claim always
 * sees them), or after DONE_FLUSH_MS when no claim comes: one round trip a batch instead of two.
 * A marker lost in between (a crash) only sends a redelivery to PostgreSQL.
 */
export class ProcessedCache {
  /** Which database's inbox the markers speak for; unset, the cache answers nothing. */
  private scope: string | undefined;
  /** Keys to mark done, named when they were done (a later rebinding does not move them). */
  private done: string[] = [];
  private flushTimer: NodeJS.Timeout | undefined;

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

  /** Registers the ids (SET NX, pipelined behind any pending `done`) and returns those already done. */
  async claim(eventIds: string[]): Promise<Set<string>> {
    const done = new Set<string>();
    if (!this.redis || !this.scope || eventIds.length === 0) return done;
    const marks = this.takeDone();
    try {
      const pipeline = this.redis.pipeline();
      for (const key of marks) pipeline.set(key, 'done', 'EX', this.ttlSeconds);
      for (const id of eventIds) pipeline.set(this.key(id), 'pending', 'EX', this.ttlSeconds, 'NX', 'GET');
      const results = (await pipeline.exec()) ?? [];
      results.forEach(([error, value], i) => {
        if (error) throw error;
        if (i >= marks.length && value === 'done') done.add(eventIds[i - marks.length] as string);
      });
    } catch (error) {
      this.onUnavailable(error as Error);
      done.clear();
    }
    return done;
  }

  /** Marks the ids done (their effects committed): written with the next claim, or soon. */
  markDone(eventIds: string[]): void {
    if (!this.redis || !this.scope || eventIds.length === 0) return;
    for (const id of eventIds) this.done.push(this.key(id));
    this.flushTimer ??= setTimeout(() => {
      this.flushTimer = undefined;
      void this.flush();
    }, DONE_FLUSH_MS).unref();
  }

  /** Writes the pending `done` markers now. */
  async flush(): Promise<void> {
    const marks = this.takeDone();
    if (!this.redis || marks.length === 0) return;
    try {
      const pipeline = this.redis.pipeline();
      for (const key of marks) pipeline.set(key, 'done', 'EX', this.ttlSeconds);
      await pipeline.exec();
    } catch (error) {
      this.onUnavailable(error as Error);
    }
  }

  private takeDone(): string[] {
    const marks = this.done;
    this.done = [];
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    return marks;
  }
}
