import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listenWithReconnect } from '../src/db/listen.js';
import { eventually, testEndpoints } from '../src/testing/index.js';

/**
 * A listener whose connection PostgreSQL ends listens again, and gives its connection back: the
 * webhook deliverer's did neither (issue 31, found by its fault spec), leaving it on its poll.
 */
describe('listenWithReconnect', () => {
  const channel = `onto_listen_${process.pid}`;
  const app = `onto-listen-test-${process.pid}`;
  let pool: pg.Pool;
  let admin: pg.Client;

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: testEndpoints().postgresUrl, max: 2, application_name: app });
    admin = new pg.Client({ connectionString: testEndpoints().postgresUrl });
    await admin.connect();
  });
  afterAll(async () => {
    await admin.end();
    await pool.end();
  });

  it('listens again after its connection is terminated, and stops for good', async () => {
    const heard: string[] = [];
    const warnings: string[] = [];
    const listening = listenWithReconnect(pool, channel, (n) => heard.push(n.payload ?? ''), {
      retryMs: 100,
      logger: { warn: (_obj, msg) => warnings.push(msg) },
      what: 'test',
    });
    await listening.ready;
    await admin.query(`NOTIFY ${channel}, 'one'`);
    await eventually('the first notification', async () => (heard.includes('one') ? true : undefined));

    const { rows } = await admin.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`,
      [app],
    );
    expect(rows).toHaveLength(1);
    await admin.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);

    // Notified until heard: the listener is back within a few retries.
    await eventually(
      'a notification after the connection was lost',
      async () => {
        await admin.query(`NOTIFY ${channel}, 'two'`);
        return heard.includes('two') ? true : undefined;
      },
      { timeoutMs: 10_000 },
    );
    expect(warnings).toContain('test listener lost; polling until it is back');
    // The lost connection went back to the pool (as broken): one connection in use, the listener's.
    expect(pool.totalCount).toBe(1);
    expect(pool.idleCount).toBe(0);

    await listening.stop();
    expect(pool.idleCount).toBe(1);
    await admin.query(`NOTIFY ${channel}, 'three'`);
    await new Promise((r) => setTimeout(r, 300));
    expect(heard).not.toContain('three');
  });
});
