import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { onCommit } from '../db/transaction.js';

export const OUTBOX_CHANNEL = 'onto_outbox';

/** The payload of this process's NOTIFYs: its own relays, woken locally, ignore them. */
export const OUTBOX_SIGNAL_SENDER = randomUUID();

/**
 * Waking relays after a commit, without NOTIFY inside the writing transaction: PostgreSQL
 * serialises the commits of transactions that NOTIFY (one queue lock held through the commit),
 * which turns group commit off and caps a busy service at one commit per WAL flush.
 *
 * The Outbox calls `wakeRelaysAfterCommit` whenever it writes; once the transaction has
 * committed, relays in this process wake at once, relays elsewhere through one NOTIFY sent
 * outside any write transaction at most every NOTIFY_EVERY_MS. Whatever is missed, the relays'
 * polling finds.
 */
const NOTIFY_EVERY_MS = 10;

const localWakers = new Set<() => void>();
let notifyPending = false;

export function onLocalOutboxWrite(wake: () => void): () => void {
  localWakers.add(wake);
  return () => localWakers.delete(wake);
}

function wakeRelays(pool: pg.Pool): void {
  for (const wake of localWakers) wake();
  if (notifyPending) return;
  notifyPending = true;
  setTimeout(() => {
    notifyPending = false;
    pool.query('SELECT pg_notify($1, $2)', [OUTBOX_CHANNEL, OUTBOX_SIGNAL_SENDER]).catch(() => {});
  }, NOTIFY_EVERY_MS).unref();
}

/**
 * Outbox rows were written on `db`: wake the relays once they are committed — after the
 * transaction of inTransaction/inTransactionTogether, at once for a pool (its statement commits
 * on its own). A client in a transaction run by hand is left to the relays' polling.
 */
export function wakeRelaysAfterCommit(db: unknown): void {
  if (onCommit(db, wakeRelays)) return;
  if (db instanceof pg.Pool) wakeRelays(db);
}
