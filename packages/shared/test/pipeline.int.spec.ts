import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransactionTogether, queryTogether, statementName } from '../src/db/pipeline.js';
import { blockedOnLock, createTestDatabase, testEndpoints } from '../src/testing/index.js';
import { kernelTracks } from './kernel.js';

describe('statements in one round trip', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let pool: pg.Pool;

  beforeAll(async () => {
    db = await createTestDatabase(testEndpoints().postgresUrl, kernelTracks);
    pool = new pg.Pool({ connectionString: db.url, max: 4 });
  });
  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  /** Counts the socket writes (syscalls: corked messages leave in one writev) while `work` runs. */
  async function writesDuring<T>(client: pg.PoolClient, work: () => Promise<T>) {
    type Sink = (...a: unknown[]) => unknown;
    const socket = (client as unknown as { connection: { stream: { _write: Sink; _writev: Sink } } }).connection.stream;
    const { _write, _writev } = socket;
    let writes = 0;
    socket._write = (...args: unknown[]) => {
      writes++;
      return _write.apply(socket, args);
    };
    socket._writev = (...args: unknown[]) => {
      writes++;
      return _writev.apply(socket, args);
    };
    try {
      return { result: await work(), writes };
    } finally {
      socket._write = _write;
      socket._writev = _writev;
    }
  }

  it('answers each statement with its own result, parameters converted as pg does, in one write', async () => {
    const client = await pool.connect();
    try {
      const { result, writes } = await writesDuring(client, () =>
        queryTogether(client, [
          { text: 'BEGIN' },
          { text: 'SELECT $1::int AS n, $2::text[] AS list, $3::jsonb AS doc', values: [7, ['a', 'b'], { x: [1] }] },
          { text: 'SELECT $1::text IS NULL AS nothing, $2::bytea AS bytes', values: [null, Buffer.from([1, 2])] },
          { text: 'SELECT n FROM generate_series(1, 3) n WHERE n > $1', values: [5] },
          { text: 'COMMIT' },
        ]),
      );
      expect(writes).toBe(1);
      expect(result.map((r) => r.command)).toEqual(['BEGIN', 'SELECT', 'SELECT', 'SELECT', 'COMMIT']);
      expect(result[1]?.rows).toEqual([{ n: 7, list: ['a', 'b'], doc: { x: [1] } }]);
      expect(result[2]?.rows).toEqual([{ nothing: true, bytes: Buffer.from([1, 2]) }]);
      expect(result[3]?.rows).toEqual([]);
      expect(client.getTransactionStatus?.() ?? 'I').toBe('I');
    } finally {
      client.release();
    }
  });

  it('sends flat arrays of scalars as literals and every other array as pg would, with the same meaning', async () => {
    const awkward = ['', 'NULL', 'a,b', '{x}', ' pad ', 'quote "', 'back\\slash', 'ünï ✓', null];
    const when = new Date('2026-11-29T12:34:56.789Z');
    const client = await pool.connect();
    try {
      const [answer] = await queryTogether(client, [
        {
          text: 'SELECT $1::text[] AS texts, $2::bigint[]::text[] AS big, $3::int[] AS ints, $4::timestamptz[] AS times, $5::int[] AS nested',
          values: [
            awkward,
            [9007199254740993n, '-5'],
            [1, undefined, -2],
            [when],
            [
              [1, 2],
              [3, 4],
            ],
          ],
        },
      ]);
      expect(answer?.rows).toEqual([
        {
          texts: awkward,
          big: ['9007199254740993', '-5'],
          ints: [1, null, -2],
          times: [when],
          nested: [
            [1, 2],
            [3, 4],
          ],
        },
      ]);
    } finally {
      client.release();
    }
  });

  it('stops at the first failure: nothing after it runs, the transaction is aborted, the client stays usable', async () => {
    await pool.query('TRUNCATE balances');
    const client = await pool.connect();
    try {
      await expect(
        queryTogether(client, [
          { text: 'BEGIN' },
          { text: 'INSERT INTO balances VALUES ($1, 1, 1)', values: ['first'] },
          { text: 'SELECT 1 / $1::int', values: [0] },
          { text: 'INSERT INTO balances VALUES ($1, 1, 1)', values: ['after'] },
          { text: 'COMMIT' },
        ]),
      ).rejects.toThrow(/division by zero/);
      await expect(client.query('SELECT 1')).rejects.toThrow(/current transaction is aborted/);
      await client.query('ROLLBACK');
      expect((await client.query('SELECT key FROM balances')).rows).toEqual([]);
      const circular: Record<string, unknown> = {};
      circular.self = circular;
      await expect(queryTogether(client, [{ text: 'SELECT $1::jsonb', values: [circular] }])).rejects.toThrow();
      expect((await client.query('SELECT 2 AS two')).rows).toEqual([{ two: 2 }]);
    } finally {
      client.release();
    }
  });

  it('gives each statement its own snapshot: a read sent with a lock sees what committed while it waited', async () => {
    await pool.query('TRUNCATE balances');
    const holder = await pool.connect();
    const waiter = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT pg_advisory_xact_lock(4242)');
      await holder.query(`INSERT INTO balances VALUES ('seen', 1, 1)`);
      const pending = queryTogether(waiter, [
        { text: 'BEGIN' },
        { text: 'SELECT pg_advisory_xact_lock($1)', values: [4242] },
        { text: 'SELECT key FROM balances' },
        { text: 'COMMIT' },
      ]);
      await blockedOnLock(pool, '%pg_advisory_xact_lock%'); // the read is sent behind the lock
      await holder.query('COMMIT');
      const results = await pending;
      expect(results[2]?.rows).toEqual([{ key: 'seen' }]);
    } finally {
      holder.release();
      waiter.release();
    }
  });

  it('runs a transaction with BEGIN beside its first statement and COMMIT beside its last writes', async () => {
    await pool.query('TRUNCATE balances');
    const value = await inTransactionTogether(
      pool,
      [
        { text: `INSERT INTO balances VALUES ($1, 10, 1) RETURNING total`, values: ['t'] },
        { text: 'SELECT count(*)::int AS n FROM balances' },
      ],
      async (tx, [inserted, counted]) => {
        const { rows } = await tx.query('SELECT sum(total)::int AS total FROM balances');
        return {
          value: { inserted: inserted?.rows[0], seen: counted?.rows[0], sum: rows[0] },
          last: [{ text: 'UPDATE balances SET total = total + $1 WHERE key = $2', values: [5, 't'] }],
        };
      },
    );
    expect(value).toEqual({ inserted: { total: 10 }, seen: { n: 1 }, sum: { total: 10 } });
    expect((await pool.query('SELECT total FROM balances')).rows).toEqual([{ total: 15 }]);

    // A failing last write: COMMIT is skipped, everything rolls back, the error comes through.
    await expect(
      inTransactionTogether(pool, [{ text: `INSERT INTO balances VALUES ('u', 1, 1)` }], async () => ({
        value: null,
        last: [{ text: `INSERT INTO balances VALUES ('t', 1, 1)` }],
      })),
    ).rejects.toThrow(/duplicate key/);
    expect((await pool.query('SELECT key FROM balances ORDER BY key')).rows).toEqual([{ key: 't' }]);
    const idle = await pool.connect();
    try {
      expect((await idle.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      idle.release();
    }
  });

  it('prepares a recurring text once per connection, survives failures in the sequence that prepares it', async () => {
    const client = await pool.connect();
    const prepared = async () =>
      (await client.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name')).rows.map(
        (r) => r.name,
      );
    try {
      // A fresh text runs unnamed until it recurs, then under one name.
      const text = `SELECT $1::int + 1 AS n /* ${Math.random()} */`;
      for (let i = 0; i < 5; i++) {
        const [r] = await queryTogether(client, [{ text, values: [i] }]);
        expect(r?.rows).toEqual([{ n: i + 1 }]);
      }
      const name = statementName(text);
      expect(name).toMatch(/^onto_\d+$/);
      expect(await prepared()).toContain(name);

      // Named but not yet prepared on another connection, and the sequence fails before it:
      // PostgreSQL skips its Parse; the next call prepares it again and runs.
      const other = await pool.connect();
      try {
        await expect(
          queryTogether(other, [
            { text: 'SELECT 1 / $1::int', values: [0] },
            { text, values: [1] },
          ]),
        ).rejects.toThrow(/division by zero/);
        const [r] = await queryTogether(other, [{ text, values: [41] }]);
        expect(r?.rows).toEqual([{ n: 42 }]);
        // Failing after the Parse succeeded: the name exists but was not recorded; Close + Parse
        // again does not collide with it.
        const fresh = `SELECT $1::int * 2 AS n /* ${Math.random()} */`;
        for (let i = 0; i < 3; i++) statementName(fresh);
        const other2 = await pool.connect();
        try {
          await expect(
            queryTogether(other2, [
              { text: fresh, values: [1] },
              { text: 'SELECT 1 / $1::int', values: [0] },
            ]),
          ).rejects.toThrow(/division by zero/);
          const [again] = await queryTogether(other2, [{ text: fresh, values: [21] }]);
          expect(again?.rows).toEqual([{ n: 42 }]);
        } finally {
          other2.release();
        }
      } finally {
        other.release();
      }

      // The same prepared text twice in one sequence, beside a transaction.
      const results = await queryTogether(client, [
        { text: 'BEGIN' },
        { text, values: [1] },
        { text, values: [2] },
        { text: 'COMMIT' },
      ]);
      expect(results.map((r) => r.rows)).toEqual([[], [{ n: 2 }], [{ n: 3 }], []]);
    } finally {
      client.release();
    }
  });
});
