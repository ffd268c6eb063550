import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { KeyRecord } from './repository.js';

/** Deletes the lock only if it still holds this token: a lock that expired and was taken by another is left alone. */
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

type Redis = FastifyInstance['redis'];

export type Lock = { state: 'acquired'; key: string; token: string } | { state: 'held' } | { state: 'unavailable' };

/**
 * Redis' part in idempotency keys, never the record: a lock that turns a concurrent duplicate
 * away before it does any work (SET NX PX with a token of its own, released only by its holder),
 * and a cache of completed responses so that a replay costs no PostgreSQL round trip. When Redis
 * does not answer, both are skipped and PostgreSQL alone keeps the guarantee.
 */
export class IdempotencyRedis {
  constructor(
    private readonly redis: Redis,
    private readonly namespace: string,
    private readonly lockMs: number,
    private readonly log: FastifyBaseLogger,
  ) {}

  private name(kind: 'lock' | 'done', worldId: string, scope: string, key: string) {
    return `${this.namespace}onto:idem:${kind}:${[worldId, scope, key].map(encodeURIComponent).join(':')}`;
  }

  private unavailable(err: unknown) {
    this.log.debug({ err }, 'redis unavailable; idempotency keys from PostgreSQL alone');
  }

  /** The completed response cached for the key, unless expired (or Redis is away). */
  async cached(worldId: string, scope: string, key: string): Promise<KeyRecord | undefined> {
    try {
      const raw = await this.redis.get(this.name('done', worldId, scope, key));
      if (!raw) return undefined;
      const record = JSON.parse(raw) as KeyRecord;
      return Date.parse(record.expiresAt) > Date.now() ? record : undefined;
    } catch (err) {
      this.unavailable(err);
      return undefined;
    }
  }

  async remember(worldId: string, scope: string, key: string, record: KeyRecord): Promise<void> {
    const ttl = Date.parse(record.expiresAt) - Date.now();
    if (!(ttl > 0)) return;
    try {
      await this.redis.set(this.name('done', worldId, scope, key), JSON.stringify(record), 'PX', ttl);
    } catch (err) {
      this.unavailable(err);
    }
  }

  async lock(worldId: string, scope: string, key: string): Promise<Lock> {
    const name = this.name('lock', worldId, scope, key);
    const token = randomUUID();
    try {
      const ok = await this.redis.set(name, token, 'PX', this.lockMs, 'NX');
      return ok === 'OK' ? { state: 'acquired', key: name, token } : { state: 'held' };
    } catch (err) {
      this.unavailable(err);
      return { state: 'unavailable' };
    }
  }

  async release(lock: Lock): Promise<void> {
    if (lock.state !== 'acquired') return;
    try {
      await this.redis.eval(RELEASE, 1, lock.key, lock.token);
    } catch (err) {
      // It expires by itself after lockMs.
      this.unavailable(err);
    }
  }
}
