import pg from 'pg';

/**
 * The test PostgreSQL's streaming replica (`./onto test` starts it: ONTO_TEST_PG_REPLICA_URL) as
 * the read-replica specs of data and intelligence use it (docs/adr/0080).
 */

/** The replica's URL of `database` (`{database}`: the service's own test database, see app.ts). */
export function testReplicaUrl(database: string): string {
  const url = process.env.ONTO_TEST_PG_REPLICA_URL;
  if (!url) throw new Error('ONTO_TEST_PG_REPLICA_URL is not set: run the tests through ./onto test');
  return url.replace(/\/[^/]*$/, `/${database}`);
}

/** A replica URL that is the primary itself: the service must refuse to start with it. */
export function primaryAsReplicaEnv(): Record<string, string> {
  const primary = process.env.ONTO_TEST_PG_URL;
  if (!primary) throw new Error('ONTO_TEST_PG_URL is not set');
  return { DATABASE_REPLICA_URLS: primary.replace(/\/[^/]*$/, '/{database}') };
}

/** The value of the first sample of `name` whose labels include `labels`, in a Prometheus text exposition (0 when none). */
export function metricSample(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.split(' ').pop()) : 0;
}

/**
 * A service's env reading from the test replica (its own database there) and from one that never
 * answers (skipped, and named in /ready); a read waits 300 ms for a position.
 */
export function replicaTestEnv(maxLagMs: number): Record<string, string> {
  return {
    DATABASE_REPLICA_URLS: `${testReplicaUrl('{database}')},postgres://postgres@127.0.0.1:1/none`,
    REPLICA_MAX_LAG_MS: String(maxLagMs),
    REPLICA_WAIT_MS: '300',
  };
}

/** A connection to the test replica that pauses its replay (to make it lag) and resumes it. */
export async function testReplica() {
  const client = new pg.Client({ connectionString: testReplicaUrl('postgres') });
  await client.connect();
  return {
    pause: async () => void (await client.query('SELECT pg_wal_replay_pause()')),
    resume: async () => void (await client.query('SELECT pg_wal_replay_resume()')),
    /** Resumes replay (whatever a failed test left) and closes. */
    end: async () => {
      await client.query('SELECT pg_wal_replay_resume()').catch(() => {});
      await client.end();
    },
  };
}
