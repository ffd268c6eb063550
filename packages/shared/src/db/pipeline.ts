/**
 * Several statements in one round trip. On a machine where every socket write costs hundreds of
 * microseconds of CPU, a transaction's cost is its round trips: BEGIN can travel with the first
 * statement, COMMIT with the last writes, and a lock with the reads that must follow it.
 *
 * The statements go out as one extended-protocol sequence (Parse, Bind, Describe, Execute each,
 * then a single Sync), written at once. PostgreSQL runs them in order, each with its own snapshot
 * (so a read sent after a lock sees what committed before the lock was granted); the first error
 * skips the rest up to the Sync, and inside a transaction block leaves it aborted, as a failed
 * statement does anyway.
 */
import pg from 'pg';
import { afterCommit, afterRollback } from '../messaging/outbox-signal.js';

export interface Statement {
  text: string;
  values?: readonly unknown[];
}

type Row = Record<string, unknown>;

interface Wire {
  parse(msg: { text: string; name: string; types: number[] }): void;
  bind(msg: { portal: string; statement: string; values: readonly (string | Buffer | null)[] }): void;
  describe(msg: { type: 'P'; name: string }): void;
  execute(msg: { portal: string }): void;
  sync(): void;
  stream: { cork?: () => void; uncork?: () => void };
}

// pg's own conversion of parameters (arrays, dates, buffers, JSON), as its Query uses it.
const prepareValue = (pg as unknown as { utils: { prepareValue: (value: unknown) => string | Buffer | null } }).utils
  .prepareValue;

/**
 * Runs the statements in one round trip; their results in order. The first failure rejects.
 * It is pg's own Query, told to write several statements before its Sync: pg then collects one
 * result per statement, as it does for a multi-statement simple query, and answers at
 * ReadyForQuery.
 */
export function queryTogether(client: pg.ClientBase, statements: readonly Statement[]): Promise<pg.QueryResult<Row>[]> {
  if (statements.length === 0) return Promise.resolve([]);
  return new Promise((resolve, reject) => {
    // Converted before anything is written: a value that cannot be sent fails the call here,
    // not halfway through a sequence the server would then wait on forever.
    const values = statements.map((s) => (s.values ?? []).map(prepareValue));
    const query = new pg.Query(statements.map((s) => s.text).join(';\n'), (error, answer) => {
      if (error) return reject(error);
      const results = (Array.isArray(answer) ? answer : [answer]) as pg.QueryResult<Row>[];
      if (results.length !== statements.length) {
        return reject(new Error(`expected ${statements.length} results, received ${results.length}`));
      }
      resolve(results);
    });
    query.submit = (connection) => {
      const wire = connection as unknown as Wire;
      wire.stream.cork?.();
      try {
        statements.forEach((s, i) => {
          wire.parse({ text: s.text, name: '', types: [] });
          wire.bind({ portal: '', statement: '', values: values[i] ?? [] });
          wire.describe({ type: 'P', name: '' });
          wire.execute({ portal: '' });
        });
        wire.sync();
      } finally {
        wire.stream.uncork?.();
      }
    };
    client.query(query);
  });
}

/** What a transaction's work answers, and the writes it leaves to travel with COMMIT. */
export interface TransactionOutcome<T> {
  value: T;
  /** Statements whose answers nobody reads: sent with COMMIT in one round trip. */
  last?: readonly Statement[];
}

/**
 * A READ COMMITTED transaction in as few round trips as its work allows: the `first` statements
 * travel with BEGIN and their results are handed to `work`, the `last` statements `work` returns
 * travel with COMMIT. Otherwise as `inTransaction`: rolled back when anything throws, the client
 * released either way, relays woken once committed outbox rows exist.
 */
export async function inTransactionTogether<T>(
  pool: pg.Pool,
  first: readonly Statement[],
  work: (tx: pg.PoolClient, first: pg.QueryResult<Row>[]) => Promise<TransactionOutcome<T>>,
): Promise<T> {
  const client = await pool.connect();
  try {
    const [, ...head] = await queryTogether(client, [{ text: 'BEGIN' }, ...first]);
    const outcome = await work(client, head);
    await queryTogether(client, [...(outcome.last ?? []), { text: 'COMMIT' }]);
    afterCommit(client, pool);
    return outcome.value;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    afterRollback(client);
    throw error;
  } finally {
    client.release();
  }
}
