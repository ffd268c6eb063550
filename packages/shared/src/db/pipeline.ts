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
 *
 * A statement text that keeps coming back is prepared once per connection and executed by name
 * from then on: parsing and planning are most of PostgreSQL's CPU for the short statements a
 * write or a relay batch sends (docs/adr/0013). See `statementName`.
 */
import pg from 'pg';
import { arrayLiteral } from './array-literal.js';
import { onTransactionClient } from './transaction.js';

export interface Statement {
  text: string;
  values?: readonly unknown[];
}

type Row = Record<string, unknown>;

interface Wire {
  close(msg: { type: 'S'; name: string }): void;
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

const isScalar = (v: unknown) =>
  v === null || v === undefined || typeof v === 'string' || typeof v === 'number' || typeof v === 'bigint';

/** pg's conversion of a value, except a flat array of strings, numbers and nulls: see arrayLiteral. */
const toWire = (value: unknown) =>
  Array.isArray(value) && value.every(isScalar) ? arrayLiteral(value) : prepareValue(value);

/** How often a text is seen unnamed before it is prepared: one-off texts are not worth a name. */
const PREPARE_AFTER = 3;
/** Named statements per process (so per connection at most): each costs server memory. */
const MAX_NAMED = 256;
/** Texts counted while not yet named; the counts are forgotten beyond this. */
const MAX_COUNTED = 4096;
const named = new Map<string, string>();
const counted = new Map<string, number>();

/**
 * The name under which a text is prepared, or '' while it stays unnamed: a text is named once it
 * has been seen PREPARE_AFTER times (texts that embed values seldom recur), until MAX_NAMED
 * names exist; after that new texts run unnamed, as every text did before.
 */
export function statementName(text: string): string {
  const name = named.get(text);
  if (name !== undefined) return name;
  if (named.size >= MAX_NAMED) return '';
  const seen = (counted.get(text) ?? 0) + 1;
  if (seen < PREPARE_AFTER) {
    if (counted.size >= MAX_COUNTED) counted.clear();
    counted.set(text, seen);
    return '';
  }
  counted.delete(text);
  const fresh = `onto_${named.size + 1}`;
  named.set(text, fresh);
  return fresh;
}

/**
 * The names known prepared on a connection. A name is recorded only after a sequence that parsed
 * it succeeded: after an error PostgreSQL skips the rest of the sequence, Parse messages included,
 * so an unrecorded name is sent again as Close (not an error for an absent statement) + Parse.
 * A connection that is replaced (pool churn, reconnect) starts with none, as the server does.
 */
const preparedOn = new WeakMap<object, Set<string>>();

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
    const values = statements.map((s) => (s.values ?? []).map(toWire));
    const names = statements.map((s) => statementName(s.text));
    const parsed: string[] = [];
    let prepared: Set<string> | undefined;
    const query = new pg.Query(statements.map((s) => s.text).join(';\n'), (error, answer) => {
      if (error) return reject(error);
      for (const name of parsed) prepared?.add(name);
      const results = (Array.isArray(answer) ? answer : [answer]) as pg.QueryResult<Row>[];
      if (results.length !== statements.length) {
        return reject(new Error(`expected ${statements.length} results, received ${results.length}`));
      }
      resolve(results);
    });
    query.submit = (connection) => {
      const wire = connection as unknown as Wire;
      prepared = preparedOn.get(connection) ?? new Set();
      preparedOn.set(connection, prepared);
      wire.stream.cork?.();
      try {
        statements.forEach((s, i) => {
          const name = names[i] ?? '';
          if (name === '' || !prepared?.has(name)) {
            if (name !== '') {
              wire.close({ type: 'S', name });
              parsed.push(name);
            }
            wire.parse({ text: s.text, name, types: [] });
          }
          wire.bind({ portal: '', statement: name, values: values[i] ?? [] });
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
 * released either way, commit hooks (onCommit) run once committed.
 */
export function inTransactionTogether<T>(
  pool: pg.Pool,
  first: readonly Statement[],
  work: (tx: pg.PoolClient, first: pg.QueryResult<Row>[]) => Promise<TransactionOutcome<T>>,
): Promise<T> {
  return onTransactionClient(pool, async (client) => {
    const [, ...head] = await queryTogether(client, [{ text: 'BEGIN' }, ...first]);
    const outcome = await work(client, head);
    await queryTogether(client, [...(outcome.last ?? []), { text: 'COMMIT' }]);
    return outcome.value;
  });
}
