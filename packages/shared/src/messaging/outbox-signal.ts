import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { OUTBOX_CHANNEL } from './outbox.js';

/** The payload of this process's NOTIFYs: its own relays, woken locally, ignore them. */
export const OUTBOX_SIGNAL_SENDER = randomUUID();

/**
 * Waking relays after a commit, without NOTIFY inside the writing transaction: PostgreSQL
 * serialises the commits of transactions that NOTIFY (one queue lock held through the commit),
 * which turns group commit off and caps a busy service at one commit per WAL flush.
 *
 * `enqueue` marks the transaction's client; `inTransaction` calls `afterCommit` once it has
 * committed: relays in this process wake at once, relays elsewhere through one NOTIFY sent
 * outside any write transaction at most every NOTIFY_EVERY_MS. Whatever is missed, the relays'
 * polling finds.
 */
const WRITTEN = Symbol('onto.outbox.written');
const NOTIFY_EVERY_MS = 10;

type Marked = { [WRITTEN]?: boolean };

const localWakers = new Set<() => void>();
let notifyPending = false;

export function markOutboxWritten(client: unknown): void {
  if (client && typeof client === 'object') (client as Marked)[WRITTEN] = true;
}

export function onLocalOutboxWrite(wake: () => void): () => void {
  localWakers.add(wake);
  return () => localWakers.delete(wake);
}

/** After COMMIT: wake the relays if this client wrote to the outbox in the transaction. */
export function afterCommit(client: pg.PoolClient, pool: pg.Pool): void {
  const marked = client as unknown as Marked;
  if (!marked[WRITTEN]) return;
  marked[WRITTEN] = false;
  for (const wake of localWakers) wake();
  if (notifyPending) return;
  notifyPending = true;
  setTimeout(() => {
    notifyPending = false;
    pool.query('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, OUTBOX_SIGNAL_SENDER]).catch(() => {});
  }, NOTIFY_EVERY_MS).unref();
}

/** After ROLLBACK: the rows are gone, nothing to announce. */
export function afterRollback(client: pg.PoolClient): void {
  (client as unknown as Marked)[WRITTEN] = false;
}
