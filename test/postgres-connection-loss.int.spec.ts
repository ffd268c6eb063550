import { buildTestService, eventually, type TestService, testEndpoints } from '@onto/shared/testing';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

/**
 * A connection that dies while a service holds it between queries (a relay awaiting the broker;
 * a PostgreSQL restart or pg_terminate_backend) must not take the process down: the pool only
 * listens for errors on idle clients, so without a listener of ours the 'error' goes unhandled
 * (found by the chaos run, ADR 41).
 */
describe('a PostgreSQL connection lost while checked out', () => {
  let service: TestService<unknown>;
  const admin = new pg.Pool({ connectionString: testEndpoints().postgresUrl, max: 1 });

  beforeAll(async () => {
    service = (await buildTestService(SERVICES[1])) as TestService<unknown>;
  });
  afterAll(async () => {
    await service?.close();
    await admin.end();
  });

  it('is logged, fails its holder’s next query, and the pool goes on', async () => {
    const client = await service.app.pg.connect();
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    await admin.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
    // the server's notice arrives while no query runs: the client emits 'error'
    await eventually('the connection to be gone', async () => {
      const { rows: left } = await admin.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [rows[0]?.pid]);
      return left.length === 0;
    });
    await new Promise((r) => setTimeout(r, 200));
    const lost = await client.query('SELECT 1').then(
      () => undefined,
      (error: Error) => error,
    );
    expect(lost).toBeInstanceOf(Error);
    client.release(lost);
    expect((await service.app.pg.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });
});
