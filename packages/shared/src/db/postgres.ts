import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import pg from 'pg';
import { appliedVersion, latestShippedVersion, type MigrationTrack, migrate } from './migrate.js';

declare module 'fastify' {
  interface FastifyInstance {
    pg: pg.Pool;
  }
}

// int8 (bigint) and numeric come back as strings by default; versions and counts here stay
// well inside 2^53, and a wrong type is worse than a checked conversion at the edges.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new RangeError(`int8 ${v} exceeds the safe integer range`);
  return n;
});

export interface PostgresOptions {
  connectionString: string;
  poolMax: number;
  applicationName: string;
  migrations: MigrationTrack[];
}

/** The service's own database: a pool, its migrations applied at boot, and a readiness check. */
export const postgresPlugin = fp(
  async (app: FastifyInstance, opts: PostgresOptions) => {
    const results = await migrate(opts.connectionString, opts.migrations);
    for (const r of results) {
      if (r.applied.length > 0) app.log.info({ table: r.table, applied: r.applied }, 'migrations applied');
    }
    const pool = new pg.Pool({
      connectionString: opts.connectionString,
      max: opts.poolMax,
      application_name: opts.applicationName,
      connectionTimeoutMillis: 5000,
    });
    pool.on('error', (err) => app.log.error({ err }, 'idle PostgreSQL client failed'));
    // The pool listens for errors only on idle clients. A connection that dies while checked out
    // and between queries (a relay awaiting the broker, a transaction awaiting its caller; a
    // server restart or pg_terminate_backend) would emit an unhandled 'error' and bring the
    // process down (the chaos run found it, ADR 41). Logged instead: its holder's next query
    // fails, and that path retries as it does for any lost connection.
    pool.on('connect', (client) => {
      client.on('error', (err) => app.log.warn({ err }, 'PostgreSQL connection lost while in use'));
    });
    app.decorate('pg', pool);
    app.addHook('onClose', async () => {
      await pool.end();
    });

    const expected = await Promise.all(
      opts.migrations.map(async (t) => ({ table: t.table, version: await latestShippedVersion(t.directory) })),
    );
    app.addReadinessCheck('postgres', async () => {
      await pool.query('SELECT 1');
    });
    app.addReadinessCheck('migrations', async () => {
      for (const { table, version } of expected) {
        const applied = await appliedVersion(pool, table);
        if (applied < version) throw new Error(`${table} is at ${applied}, expected ${version}`);
      }
    });
  },
  { name: 'onto-postgres', dependencies: ['onto-health'] },
);
