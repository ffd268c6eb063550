import { type Queryable, queryTogether, type Statement } from '@onto/shared';
import type pg from 'pg';

/**
 * A transaction's writes held back until something needs an answer: they travel, in order, with
 * the next statement that does (one round trip for both), or are handed to the inbox consumer to
 * travel with COMMIT. The order of statements on the connection is the order they were issued,
 * so every read still sees every write before it.
 */
export class WriteBehind implements Queryable {
  private pending: Statement[] = [];

  constructor(private readonly client: pg.PoolClient) {}

  /** A write whose answer nobody reads; it fails the transaction when it fails. */
  write(text: string, values: unknown[]): void {
    this.pending.push({ text, values });
  }

  /** A statement whose answer is needed, sent with the writes held back before it. */
  async query<R extends Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }> {
    if (this.pending.length === 0) return this.client.query<R>(text, values);
    const results = await queryTogether(this.client, [...this.take(), { text, ...(values ? { values } : {}) }]);
    return results.at(-1) as unknown as { rows: R[]; rowCount: number | null };
  }

  /** Statements whose answers are needed, sent together with the writes held back before them. */
  async queryAll(statements: Statement[]): Promise<{ rows: Record<string, unknown>[] }[]> {
    if (statements.length === 0) return [];
    const held = this.take();
    return (await queryTogether(this.client, [...held, ...statements])).slice(held.length);
  }

  /**
   * The client with nothing held back, for code that needs the client itself (an Outbox on it
   * wakes the relays once its transaction commits).
   */
  async direct(): Promise<pg.PoolClient> {
    if (this.pending.length > 0) await queryTogether(this.client, this.take());
    return this.client;
  }

  /** The writes still held back, for the caller to send (with COMMIT); none remain here. */
  take(): Statement[] {
    const pending = this.pending;
    this.pending = [];
    return pending;
  }
}
