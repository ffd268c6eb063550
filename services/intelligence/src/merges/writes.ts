/**
 * Writes a merge's definitions into a world through the routes' own PUT and DELETE (the
 * definition writers), in the caller's transaction: each write is checked, versioned, recorded
 * in the history and recomputed like any other.
 */
import { HttpProblem, type SchemaDocument } from '@onto/shared';
import type pg from 'pg';
import type { DefinitionWriter } from '../definition-routes.js';
import { type Body, type Kind, keyOf } from './history.js';

export interface Write {
  kind: Kind;
  name: string;
  /** null: delete. */
  body: Body | null;
}

export interface WriteFailure {
  status: number;
  reason: string;
  field?: string;
}

// Deleting a decision before its rule, defining a derived property before what reads it: this
// order suits most merges; the passes below find the rest.
const RANK = (w: Write) =>
  w.body === null ? { decision: 0, rule: 4, derived: 5 }[w.kind] : { derived: 1, rule: 2, decision: 3 }[w.kind];

/**
 * Runs the writes until all are done, in passes: a write refused only because another of the
 * merge's writes must come first (a rule reading a derived property not yet defined) is tried
 * again in the next pass, each attempt in a savepoint so that a refusal leaves nothing behind.
 * A pass that makes no progress ends it with the first refusal. Answers each written
 * definition's version (null: deleted).
 */
export async function writeAll(
  tx: pg.PoolClient,
  writers: Record<Kind, DefinitionWriter>,
  world: string,
  writes: Write[],
  document?: SchemaDocument,
): Promise<{ versions: Map<string, number | null> } | { failed: WriteFailure }> {
  for (const w of writes) {
    if (w.body === null) continue;
    const errors = writers[w.kind].check(w.body);
    if (errors.length > 0) {
      const first = errors[0] as { path: string; message: string };
      return {
        failed: {
          status: 422,
          reason: `${writers[w.kind].what} ${w.name}: ${first.path} ${first.message}`,
          field: `${w.kind}/${w.name}${first.path}`,
        },
      };
    }
  }
  const versions = new Map<string, number | null>();
  let pending = [...writes].sort((a, b) => RANK(a) - RANK(b));
  while (pending.length > 0) {
    const refused: { write: Write; error: HttpProblem }[] = [];
    for (const w of pending) {
      await tx.query('SAVEPOINT merge_write');
      try {
        const writer = writers[w.kind];
        if (w.body === null) {
          await writer.remove(tx, world, w.name);
          versions.set(keyOf(w.kind, w.name), null);
        } else {
          const version = await writer.put(tx, world, w.name, w.body, document ? { document } : {});
          versions.set(keyOf(w.kind, w.name), version);
        }
        await tx.query('RELEASE SAVEPOINT merge_write');
      } catch (err) {
        if (!(err instanceof HttpProblem)) throw err;
        await tx.query('ROLLBACK TO SAVEPOINT merge_write');
        refused.push({ write: w, error: err });
      }
    }
    const first = refused[0];
    if (first && refused.length === pending.length) {
      const path = first.error.extensions.errors?.[0]?.path ?? '';
      return {
        failed: {
          status: first.error.status,
          reason: first.error.message,
          field: `${first.write.kind}/${first.write.name}${path === '/' ? '' : path}`,
        },
      };
    }
    pending = refused.map((r) => r.write);
  }
  return { versions };
}
