/**
 * Read replicas with read-your-writes (issue 33, docs/adr/0080). A service given
 * `DATABASE_REPLICA_URLS` serves reads from streaming replicas of its primary:
 *
 * - every successful write answers, beside its `<service>=<commit>` consistency token, the WAL
 *   position of the primary after its commit (`<service>lsn=<bytes>`);
 * - a read presenting such a position is served by a replica once the replica has replayed it
 *   (waited for, bounded by REPLICA_WAIT_MS), else by the primary; a read presenting none goes to
 *   a usable replica;
 * - a replica that does not answer, or lags its primary by more than REPLICA_MAX_LAG_MS, is not
 *   used until it catches up: a gauge per replica and a /ready detail say so.
 *
 * A URL that is not a replica (`pg_is_in_recovery()` false) or is a replica of another cluster
 * (another system identifier) stops the service at start-up: serving reads from it would be wrong,
 * not slow.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import pg from 'pg';
import { Counter, Gauge } from 'prom-client';
import { CheckFailed } from '../readiness.js';
import { consistencyToken } from './consistency.js';
import { requestHeader } from './headers.js';

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The pool a read of this request goes to: a replica that has what the request's consistency
     * token names, or the primary. Reads that must see the latest state (preconditions, a write's
     * own reads, merges) use `app.pg`.
     */
    readDb(request: FastifyRequest, options?: ReadOptions): Promise<pg.Pool>;
    /** Counts a read served by the replica a `tentative` readDb gave (reason: no position). */
    countReplicaRead(): void;
  }
}

export interface ReadOptions {
  /**
   * The read must see everything the primary has committed now (a commit cut on the primary, a
   * ref resolved there): a replica serves it once it has replayed the primary's WAL position.
   */
  primaryNow?: boolean;
  /**
   * The caller may not read from the replica it gets (pinnedRead tries a replica's cut first and
   * falls back to readDb with primaryNow): not counted in onto_db_reads_total until it calls
   * `countReplicaRead`, so a request counts once.
   */
  tentative?: boolean;
}

export interface ReplicaOptions {
  /** The service, as in its consistency token (`data`): the WAL position travels as `<service>lsn`. */
  service: string;
  urls: string[];
  poolMax: number;
  applicationName: string;
  /** A replica further behind than this is not read from. */
  maxLagMs: number;
  /** How long a read waits for a replica to replay the position its token names. */
  waitMs: number;
  /** How often each instance looks at its replicas. */
  probeMs?: number;
  /**
   * A write's answer carries `<service>lsn` whatever its token names. Otherwise only beside
   * `<service>=<commit>`: intelligence has no version of its own, its writes answer what they
   * reflect of data (`data=<watermark>`).
   */
  positionOnEveryToken?: boolean;
}

/** The plugin's options from a service's configuration (readReplicaConfigSchema and DB_POOL_MAX). */
export function replicaOptions(
  service: string,
  config: {
    DATABASE_REPLICA_URLS?: string | undefined;
    DB_POOL_MAX: number;
    REPLICA_MAX_LAG_MS: number;
    REPLICA_WAIT_MS: number;
  },
  more: Partial<ReplicaOptions> = {},
): ReplicaOptions {
  return {
    service,
    urls: config.DATABASE_REPLICA_URLS?.split(',') ?? [],
    poolMax: config.DB_POOL_MAX,
    applicationName: `onto-${service}`,
    maxLagMs: config.REPLICA_MAX_LAG_MS,
    waitMs: config.REPLICA_WAIT_MS,
    ...more,
  };
}

/** What one replica is, as this instance last saw it. */
interface Replica {
  /** host:port/database, without credentials: the label of its metrics and /ready detail. */
  name: string;
  pool: pg.Pool;
  /** The probe's own connection, whose queries time out: a replica that hangs is one that is down. */
  probe: pg.Pool;
  replayed: bigint | null;
  lagMs: number | null;
  error: string | null;
}

/** The WAL position of a pg_lsn text (`16/B374D848`) as bytes. */
export function lsnBytes(lsn: string): bigint {
  const m = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(lsn);
  if (!m) throw new Error(`not a WAL position: ${lsn}`);
  return (BigInt(`0x${m[1]}`) << 32n) + BigInt(`0x${m[2]}`);
}

/** `<service>lsn=<bytes>` of the request's X-Consistency-Token, if it carries one. */
export function walPositionOf(request: FastifyRequest, service: string): bigint | undefined {
  const raw = requestHeader(request, 'x-consistency-token');
  if (!raw) return undefined;
  for (const part of raw.split(/[,;]/)) {
    const [key, value] = part.trim().split('=');
    if (key === `${service}lsn` && value !== undefined && /^[0-9]{1,20}$/.test(value)) return BigInt(value);
  }
  return undefined;
}

const nameOf = (url: string) => {
  const u = new URL(url);
  return `${u.hostname}:${u.port || '5432'}${u.pathname}`;
};

/** The system identifier of the cluster behind `db` and whether it is a standby. */
async function identify(db: pg.Pool | pg.Client): Promise<{ id: string; standby: boolean }> {
  const { rows } = await db.query<{ id: string; standby: boolean }>(
    'SELECT system_identifier::text AS id, pg_is_in_recovery() AS standby FROM pg_control_system()',
  );
  const row = rows[0];
  if (!row) throw new Error('pg_control_system() answered nothing');
  return row;
}

export const replicasPlugin = fp(
  async (app: FastifyInstance, opts: ReplicaOptions) => {
    const primary = app.pg;
    if (opts.urls.length === 0) {
      app.decorate('readDb', async () => primary);
      app.decorate('countReplicaRead', () => {});
      return;
    }
    const own = await identify(primary);
    const replicas: Replica[] = [];
    for (const url of opts.urls) {
      const name = nameOf(url);
      // Checked once, by a connection of its own, before any read can go there.
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
      let found: { id: string; standby: boolean } | undefined;
      try {
        await client.connect();
        found = await identify(client);
      } catch (err) {
        // Down at start-up: used once it answers (and is checked then).
        app.log.warn({ err, replica: name }, 'read replica unreachable at start-up');
      } finally {
        await client.end().catch(() => {});
      }
      if (found && !found.standby) {
        throw new Error(`DATABASE_REPLICA_URLS: ${name} is not a replica (pg_is_in_recovery() is false)`);
      }
      if (found && found.id !== own.id) {
        throw new Error(
          `DATABASE_REPLICA_URLS: ${name} replicates another cluster (system identifier ${found.id}, the primary's is ${own.id})`,
        );
      }
      const pool = new pg.Pool({
        connectionString: url,
        max: opts.poolMax,
        application_name: opts.applicationName,
        connectionTimeoutMillis: 2000,
      });
      pool.on('error', (err) => app.log.warn({ err, replica: name }, 'idle read-replica client failed'));
      pool.on('connect', (c) => {
        c.on('error', (err) => app.log.warn({ err, replica: name }, 'read-replica connection lost while in use'));
      });
      const probe = new pg.Pool({
        connectionString: url,
        max: 4,
        application_name: `${opts.applicationName}-replica-probe`,
        connectionTimeoutMillis: 1000,
        query_timeout: 1000,
      });
      probe.on('error', () => {});
      replicas.push({ name, pool, probe, replayed: null, lagMs: null, error: found ? null : 'not reached yet' });
    }

    const lag = new Gauge({
      name: 'onto_db_replica_lag_seconds',
      help: 'how far a read replica is behind its primary, as this instance last saw it (-1: unreachable)',
      labelNames: ['replica'] as const,
      registers: [app.metrics],
    });
    const usableGauge = new Gauge({
      name: 'onto_db_replica_usable',
      help: 'whether reads go to the replica (1) or skip it (0): unreachable, or behind by more than REPLICA_MAX_LAG_MS',
      labelNames: ['replica'] as const,
      registers: [app.metrics],
    });
    const reads = new Counter({
      name: 'onto_db_reads_total',
      help: 'reads routed by read-your-writes (docs/adr/0080), by where they went and why',
      labelNames: ['target', 'reason'] as const,
      registers: [app.metrics],
    });

    const usable = (r: Replica) => r.error === null && r.lagMs !== null && r.lagMs <= opts.maxLagMs;

    /** Looks at every replica: how far it has replayed, and how far behind the primary it is. */
    const probe = async () => {
      let head: bigint | null = null;
      try {
        const { rows } = await primary.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
        head = lsnBytes(rows[0]?.lsn as string);
      } catch {
        // The primary's own trouble: the replicas are looked at anyway.
      }
      await Promise.all(
        replicas.map(async (r) => {
          try {
            const { rows } = await r.probe.query<{ lsn: string | null; behind: number | null; id: string }>(
              `SELECT pg_last_wal_replay_lsn()::text AS lsn,
                      (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS behind,
                      (SELECT system_identifier::text FROM pg_control_system()) AS id`,
            );
            const row = rows[0];
            if (!row?.lsn) throw new Error('it replays nothing (not a standby)');
            if (row.id !== own.id) throw new Error(`it replicates another cluster (${row.id})`);
            r.replayed = lsnBytes(row.lsn);
            // Caught up with the primary: no lag, however long ago its last transaction was.
            r.lagMs = head !== null && r.replayed >= head ? 0 : Math.max(0, row.behind ?? 0);
            r.error = null;
          } catch (err) {
            r.error = (err as Error).message;
            r.lagMs = null;
          }
          lag.set({ replica: r.name }, r.lagMs === null ? -1 : r.lagMs / 1000);
          usableGauge.set({ replica: r.name }, usable(r) ? 1 : 0);
        }),
      );
    };
    await probe();
    let timer: NodeJS.Timeout | undefined;
    let closing = false;
    const again = () => {
      if (closing) return;
      timer = setTimeout(() => void probe().finally(again), opts.probeMs ?? 250);
      timer.unref();
    };
    again();

    let next = 0;
    /** A usable replica, in turn. */
    const pick = () => {
      const candidates = replicas.filter(usable);
      if (candidates.length === 0) return undefined;
      next = (next + 1) % candidates.length;
      return candidates[next];
    };
    const replayedOn = async (r: Replica) => {
      const { rows } = await r.probe.query<{ lsn: string | null }>('SELECT pg_last_wal_replay_lsn()::text AS lsn');
      return rows[0]?.lsn ? lsnBytes(rows[0].lsn) : null;
    };

    app.decorate('countReplicaRead', () => reads.inc({ target: 'replica', reason: 'no position' }));
    app.decorate('readDb', async (request: FastifyRequest, options: ReadOptions = {}) => {
      let wanted = walPositionOf(request, opts.service);
      // A token naming another service's version (control=4 in data) was waited for on the
      // primary before this read: the replica must have replayed what the primary has now.
      if (options.primaryNow || Object.keys(consistencyToken(request)).some((k) => k !== opts.service)) {
        const { rows } = await primary.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
        const now = lsnBytes(rows[0]?.lsn as string);
        if (wanted === undefined || now > wanted) wanted = now;
      }
      if (wanted === undefined) {
        const r = pick();
        if (options.tentative) return r ? r.pool : primary;
        reads.inc({ target: r ? 'replica' : 'primary', reason: r ? 'no position' : 'no usable replica' });
        return r ? r.pool : primary;
      }
      // One that the last probe saw past the position, else wait (bounded) for the most advanced.
      const ready = replicas.filter((r) => usable(r) && r.replayed !== null && r.replayed >= wanted);
      if (ready.length > 0) {
        reads.inc({ target: 'replica', reason: 'replayed' });
        return ready[Math.floor(Math.random() * ready.length)]?.pool as pg.Pool;
      }
      const best = replicas.filter(usable).sort((a, b) => Number((b.replayed ?? 0n) - (a.replayed ?? 0n)))[0];
      if (best) {
        const deadline = Date.now() + opts.waitMs;
        try {
          for (let delay = 2; Date.now() < deadline; delay = Math.min(delay * 2, 50)) {
            const replayed = await replayedOn(best);
            if (replayed !== null && replayed >= wanted) {
              reads.inc({ target: 'replica', reason: 'waited' });
              return best.pool;
            }
            await new Promise((resolve) => setTimeout(resolve, Math.min(delay, Math.max(0, deadline - Date.now()))));
          }
        } catch {
          // Gone while waiting: the primary serves.
        }
      }
      reads.inc({ target: 'primary', reason: best ? 'replica behind the position' : 'no usable replica' });
      return primary;
    });

    // A successful write answers the primary's WAL position after its commit (onSend runs once
    // the handler's transaction has committed), beside its commit.
    app.addHook('onSend', async (request, reply, payload) => {
      if (request.method === 'GET' || request.method === 'HEAD' || reply.statusCode >= 300) return payload;
      const token = reply.getHeader('x-consistency-token');
      if (typeof token !== 'string' || !(opts.positionOnEveryToken || token.includes(`${opts.service}=`))) {
        return payload;
      }
      try {
        const { rows } = await primary.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
        reply.header('x-consistency-token', `${token}, ${opts.service}lsn=${lsnBytes(rows[0]?.lsn as string)}`);
      } catch (err) {
        // The write stands; without its position the client's next read may be served by a
        // replica that has not replayed it yet (as any read without a token).
        app.log.warn({ err }, 'could not read the WAL position after a write');
      }
      return payload;
    });

    app.addReadinessCheck(
      'postgres-replicas',
      async () => {
        const down = replicas.filter((r) => !usable(r));
        const worst = Math.max(...replicas.map((r) => r.lagMs ?? Number.POSITIVE_INFINITY));
        if (down.length === replicas.length) {
          throw new CheckFailed(
            `no replica is read from: ${down.map((r) => `${r.name} ${r.error ?? `lags ${Math.round(r.lagMs ?? 0)} ms`}`).join('; ')}`,
            { lagMs: Number.isFinite(worst) ? worst : null, boundMs: opts.maxLagMs },
          );
        }
        return { lagMs: Number.isFinite(worst) ? worst : null, boundMs: opts.maxLagMs };
      },
      // Reads fall back to the primary: a replica down degrades, it does not stop the service.
      { required: false },
    );

    app.addHook('onClose', async () => {
      closing = true;
      if (timer) clearTimeout(timer);
      await Promise.all(replicas.flatMap((r) => [r.pool.end().catch(() => {}), r.probe.end().catch(() => {})]));
    });
  },
  { name: 'onto-postgres-replicas', dependencies: ['onto-postgres', 'onto-health', 'onto-metrics'] },
);
