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

/**
 * A connection to the test replica that pauses its replay (to make it lag) and resumes it. The
 * replica is one for the whole cluster, and spec files run in parallel: a pause holds an advisory
 * lock on the primary until its resume, so one file's resume never ends another's pause.
 */
export async function testReplica() {
  const client = new pg.Client({ connectionString: testReplicaUrl('postgres') });
  const primary = process.env.ONTO_TEST_PG_URL;
  if (!primary) throw new Error('ONTO_TEST_PG_URL is not set');
  const lock = new pg.Client({ connectionString: primary });
  await client.connect();
  await lock.connect();
  let held = false;
  // Only the holder of the lock resumes: another file's pause may be on now.
  const resume = async () => {
    if (!held) return;
    await client.query('SELECT pg_wal_replay_resume()');
    held = false;
    await lock.query('SELECT pg_advisory_unlock($1)', [PAUSE_LOCK]);
  };
  return {
    /**
     * Pauses replay and returns once it has paused: pg_wal_replay_pause() only asks, and the startup
     * process may replay what arrives meanwhile (a write made right after would then be on the replica).
     */
    pause: async () => {
      await lock.query('SELECT pg_advisory_lock($1)', [PAUSE_LOCK]);
      held = true;
      // Caught up first (another file's pause may just have ended): the lag starts from now.
      const { rows: at } = await lock.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      const caughtUp = Date.now() + 30_000;
      for (;;) {
        const { rows } = await client.query<{ behind: boolean }>(
          'SELECT pg_last_wal_replay_lsn() < $1::pg_lsn AS behind',
          [at[0]?.lsn],
        );
        if (rows[0]?.behind === false) break;
        if (Date.now() > caughtUp) throw new Error(`replica has not replayed ${at[0]?.lsn} after 30 s`);
        await new Promise((r) => setTimeout(r, 20));
      }
      await client.query('SELECT pg_wal_replay_pause()');
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await client.query<{ state: string }>('SELECT pg_get_wal_replay_pause_state() AS state');
        if (rows[0]?.state === 'paused') return;
        if (Date.now() > deadline) throw new Error(`replica replay not paused after 10 s: ${rows[0]?.state}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    resume,
    /** Resumes replay (if a failed test left it paused) and closes. */
    end: async () => {
      await resume().catch(() => {});
      await client.end();
      await lock.end();
    },
  };
}

/** The advisory lock (on the primary) a paused replica is held under. */
const PAUSE_LOCK = 0x6f6e746f; // 'onto'
