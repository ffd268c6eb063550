import { BadRequest, HttpProblem, Unprocessable } from '@onto/shared';
import type pg from 'pg';
import { emptySchema } from '../schema/model.js';
import { currentSchema, type SchemaHead } from '../schema/repository.js';

/** A tag's name (tags.ts); refs tell tags from commits and instants, so a tag may look like neither. */
export const TAG_NAME = '^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$';
/** The names a new tag may take: not all digits (a commit), not starting like an instant. */
export const NEW_TAG_NAME = '^(?![0-9]+$)(?![0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ])[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$';

const COMMIT = /^[0-9]{1,15}$/; // within Number.MAX_SAFE_INTEGER
const INSTANT_LIKE = /^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]/;
const RFC_3339 =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?([Zz]|[+-]([0-9]{2}):([0-9]{2}))$/;

/** What `from.ref` names: a data commit, an RFC 3339 instant (offset required) or a tag. */
export type ParsedRef = { commit: number } | { instant: string } | { tag: string };

const REF_PATH = '/from/ref';

/** Tells the kind of a ref by its shape; 400 naming `/from/ref` when it is none of them. */
export function parseRef(raw: string): ParsedRef {
  if (/^[0-9]+$/.test(raw)) {
    if (!COMMIT.test(raw)) {
      throw new BadRequest(`ref ${raw} is not a commit`, [
        { path: REF_PATH, message: 'a commit has at most 15 digits' },
      ]);
    }
    return { commit: Number(raw) };
  }
  if (INSTANT_LIKE.test(raw)) {
    if (!isRfc3339(raw)) {
      throw new BadRequest(`ref ${raw} is not an RFC 3339 instant`, [
        { path: REF_PATH, message: 'must be an RFC 3339 instant with an offset, like 2026-12-01T10:00:00Z' },
      ]);
    }
    return { instant: raw };
  }
  if (new RegExp(TAG_NAME).test(raw)) return { tag: raw };
  throw new BadRequest(`ref ${raw} is neither a commit, an instant nor a tag name`, [
    { path: REF_PATH, message: 'must be a data commit (digits), an RFC 3339 instant or a tag name' },
  ]);
}

function isRfc3339(raw: string): boolean {
  const m = RFC_3339.exec(raw);
  if (!m) return false;
  const n = (group: number) => Number(m[group] ?? 0);
  const date = new Date(Date.UTC(n(1), n(2) - 1, n(3)));
  return (
    date.getUTCMonth() === n(2) - 1 &&
    date.getUTCDate() === n(3) &&
    n(4) < 24 &&
    n(5) < 60 &&
    n(6) < 60 &&
    n(9) < 24 &&
    n(10) < 60
  );
}

/** Where a fork starts: the schema the child copies, and the ref data resolves on the base's chain. */
export interface ForkPoint {
  schema: SchemaHead;
  /** For `world.created`: absent = now; tags travel as their instant. */
  ref?: { commit: number } | { instant: string };
}

/**
 * Resolves a fork's ref against the base world (already locked and READY): a commit or no ref
 * copies the base's current schema (data checks the commit); an instant copies the schema of
 * that instant; a tag copies its schema version and forks data at its data commit (a tag made
 * before tags had vectors: at the moment it was made). A tag still PENDING is a 409.
 */
export async function forkPoint(tx: pg.ClientBase, base: string, raw: string | undefined): Promise<ForkPoint> {
  if (raw === undefined) return { schema: await currentSchema(tx, base) };
  const ref = parseRef(raw);
  if ('commit' in ref) return { schema: await currentSchema(tx, base), ref };
  if ('tag' in ref) {
    const { rows } = await tx.query<{ version: number; commit: string | null; instant: string; status: string }>(
      `SELECT (ref->>'control')::int AS version, ref->>'data' AS commit, status,
              to_json(created_at)#>>'{}' AS instant
         FROM world_tags WHERE world_id = $1 AND name = $2`,
      [base, ref.tag],
    );
    const tag = rows[0];
    if (!tag) {
      throw new HttpProblem(404, 'not-found', 'Not Found', `world ${base} has no tag ${ref.tag}`, {
        errors: [{ path: REF_PATH, message: `no tag ${ref.tag} in world ${base}` }],
      });
    }
    if (tag.status === 'PENDING') {
      throw new HttpProblem(409, 'conflict', 'Conflict', `tag ${ref.tag} of ${base} is still PENDING`, {
        errors: [{ path: REF_PATH, message: `tag ${ref.tag} waits for data's and intelligence's positions` }],
      });
    }
    const schema = await schemaVersion(tx, base, tag.version);
    return { schema, ref: tag.commit === null ? { instant: tag.instant } : { commit: Number(tag.commit) } };
  }
  const { rows } = await tx.query<{ future: boolean; early: boolean; instant: string; created: string }>(
    `SELECT $2::timestamptz > clock_timestamp() AS future, $2::timestamptz < created_at AS early,
            to_json($2::timestamptz)#>>'{}' AS instant, to_json(created_at)#>>'{}' AS created
       FROM worlds WHERE id = $1`,
    [base, ref.instant],
  );
  const at = rows[0] as (typeof rows)[number];
  if (at.future) {
    throw new Unprocessable(`ref ${raw} is in the future`, [{ path: REF_PATH, message: 'must not be in the future' }]);
  }
  if (at.early) {
    throw new Unprocessable(`world ${base} did not exist at ${raw}`, [
      { path: REF_PATH, message: `must not be before world ${base} was created (${at.created})` },
    ]);
  }
  const { rows: versions } = await tx.query<SchemaHead>(
    `SELECT version, document FROM schema_versions WHERE world_id = $1 AND created_at <= $2::timestamptz
      ORDER BY version DESC LIMIT 1`,
    [base, at.instant],
  );
  return { schema: versions[0] ?? { version: 0, document: emptySchema() }, ref: { instant: at.instant } };
}

async function schemaVersion(tx: pg.ClientBase, world: string, version: number): Promise<SchemaHead> {
  if (version === 0) return { version: 0, document: emptySchema() };
  const { rows } = await tx.query<SchemaHead>(
    'SELECT version, document FROM schema_versions WHERE world_id = $1 AND version = $2',
    [world, version],
  );
  if (!rows[0]) throw new Error(`world ${world} has no schema version ${version}, which one of its tags names`);
  return rows[0];
}
