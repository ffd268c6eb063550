import {
  instantTime,
  isEvent,
  type ProvisionOutcome,
  type ReceivedEvent,
  type TagRequest,
  type WorldOrigin,
  worldProvisioning,
} from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { checkerAnswers } from '../checker/answers.js';
import { dropWorldSeries } from '../series/repository.js';
import { cutCommitIn } from '../storage/commit.js';
import { keptPoints } from '../storage/horizon.js';
import { lockWorldForDrop } from './locks.js';
import { commitAtInstant } from './refs.js';
import { applyRetention } from './retention.js';

/**
 * Removes a world's objects, links, their history and its schema replica. The world's drop lock
 * is taken first: writes in flight finish before, later ones find the world gone (404).
 */
async function dropWorld(tx: pg.ClientBase, worldId: string): Promise<void> {
  await lockWorldForDrop(tx, worldId);
  for (const table of [
    'object_heads',
    'object_history',
    'link_heads',
    'link_history',
    'schema_versions',
    'world_tags',
    'world_retention',
    'history_pins',
  ]) {
    await tx.query(`DELETE FROM ${table} WHERE world_id = $1`, [worldId]);
  }
  await dropWorldSeries(tx, worldId);
}

const refused = (field: string, reason: string): ProvisionOutcome => ({ failed: { field, reason } });

/**
 * Records a world: a fresh one starts at data's head; a fork records its base and the commit it
 * forks at (docs/adr/0023), one row whatever the base's size. The commit is cut in this
 * transaction, so every write of the base at or before it has committed and every later one is
 * after it: the fork point is exact under concurrent writers.
 */
async function provisionWorld(tx: pg.ClientBase, worldId: string, from: WorldOrigin | null): Promise<ProvisionOutcome> {
  const outcome = await provisionIn(tx, worldId, from);
  if (outcome && 'failed' in outcome) return outcome;
  // The world's first commit and when it came to be here: what a ref before the world is
  // measured by (docs/adr/0069), so that intelligence refuses the same instants data does.
  const { rows } = await tx.query<{ commit: string; at: string }>(
    `SELECT created_seq::text AS commit,
            to_char(provisioned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
       FROM worlds WHERE id = $1`,
    [worldId],
  );
  const created = rows[0];
  if (!created) return outcome;
  return { reply: { ...outcome?.reply, created: { commit: Number(created.commit), at: created.at } } };
}

async function provisionIn(tx: pg.ClientBase, worldId: string, from: WorldOrigin | null): Promise<ProvisionOutcome> {
  // A world.created sent again (control retrying) finds the world recorded: the same answer.
  const { rows: known } = await tx.query<{ base_world: string | null; base_seq: string | null; created_seq: string }>(
    'SELECT base_world, base_seq, created_seq FROM worlds WHERE id = $1',
    [worldId],
  );
  const recorded = known[0];
  if (recorded?.base_world) {
    return { reply: { base: { world: recorded.base_world, commit: Number(recorded.base_seq) } } };
  }
  if (recorded && Number(recorded.created_seq) > 0) return undefined;
  if (from === null) {
    // No write can be in a world before it exists: its first commit is data's head now.
    await tx.query(
      'UPDATE worlds SET created_seq = (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM data_seq) WHERE id = $1',
      [worldId],
    );
    return undefined;
  }
  const cut = await cutCommitIn(tx);
  const { rows } = await tx.query<{ created_seq: string; provisioned_at: Date }>(
    'SELECT created_seq, provisioned_at FROM worlds WHERE id = $1',
    [from.world],
  );
  const base = rows[0];
  if (!base) return refused('/from/world', `world ${from.world} is not provisioned in data`);
  const baseCreated = Number(base.created_seq);
  let commit = cut;
  const ref = from.ref ?? {};
  if (ref.commit !== undefined) {
    if (!Number.isSafeInteger(ref.commit) || ref.commit > cut) {
      return refused('/from/ref', `commit ${ref.commit} is ahead of data's head (${cut}): a ref in the future`);
    }
    if (ref.commit < baseCreated) {
      return refused('/from/ref', `commit ${ref.commit} is before world ${from.world} existed (from ${baseCreated})`);
    }
    commit = ref.commit;
  } else if (ref.instant !== undefined) {
    // Calendar-checked as ?at= is (a 2026-02-30 is refused here, not by PostgreSQL mid-provisioning).
    const time = instantTime(ref.instant);
    if (time === undefined) {
      return refused('/from/ref', `${ref.instant} is not an RFC 3339 instant`);
    }
    if (time > Date.now()) return refused('/from/ref', `${ref.instant} is in the future`);
    if (time < base.provisioned_at.getTime()) {
      return refused('/from/ref', `world ${from.world} did not exist at ${ref.instant}`);
    }
    commit = await commitAtInstant(tx, from.world, ref.instant, baseCreated, cut);
  }
  // Not below the base's retained horizon (docs/adr/0072) unless a kept point names the commit; the
  // lock waits for a pruning batch of the base and makes the next one see this fork point.
  const { rows: retained } = await tx.query<{ horizon_seq: string }>(
    'SELECT horizon_seq FROM world_retention WHERE world_id = $1 FOR SHARE',
    [from.world],
  );
  const horizon = Number(retained[0]?.horizon_seq ?? 0);
  if (commit < horizon && !(await keptPoints(tx, from.world)).includes(commit)) {
    return refused('/from/ref', `commit ${commit} of ${from.world} is before its retained horizon (${horizon})`);
  }
  await tx.query('UPDATE worlds SET base_world = $2, base_seq = $3, created_seq = $3 WHERE id = $1', [
    worldId,
    from.world,
    commit,
  ]);
  return { reply: { base: { world: from.world, commit } } };
}

/**
 * data's part of a tag's vector (docs/adr/0029): a commit cut in the request's inbox transaction,
 * so every write acknowledged before control made the tag is at or below it, and reads at it are
 * exact. The tag is kept with its commit, so reads resolve `?at=<tag>` here (docs/adr/0046); a
 * tag made again under its name (a newer request) replaces it.
 */
async function tagPosition(
  tx: pg.ClientBase,
  worldId: string,
  { tag, request }: TagRequest,
): Promise<{ commit: number; written: number }> {
  const commit = await cutCommitIn(tx);
  // The world's own newest write in the tag: a reader (intelligence) that has applied it has all
  // of the world's own data at the tag's commit, whose seq is global and may be no write of it.
  const newest = (table: string) =>
    `(SELECT x.seq FROM ${table} x WHERE x.world_id = $1 AND x.seq <= $2 ORDER BY x.seq DESC LIMIT 1)`;
  const { rows } = await tx.query<{ written: string | null }>(
    `SELECT greatest(${newest('object_heads')}, ${newest('object_history')},
                     ${newest('link_history')}, ${newest('series_batches')})::text AS written`,
    [worldId, commit],
  );
  await tx.query(
    `INSERT INTO world_tags (world_id, name, request_id, commit) VALUES ($1, $2, $3, $4)
     ON CONFLICT (world_id, name) DO UPDATE SET request_id = EXCLUDED.request_id, commit = EXCLUDED.commit
      WHERE world_tags.request_id < EXCLUDED.request_id`,
    [worldId, tag, request, commit],
  );
  return { commit, written: Number(rows[0]?.written ?? 0) };
}

/**
 * `world.protection.updated`: the world's protection, which every write reads with the world
 * (docs/adr/0058). Only a greater revision replaces it, so a redelivered older one changes nothing.
 */
async function applyProtection(tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> {
  for (const { event } of events) {
    if (!isEvent(event, 'world.protection.updated')) continue;
    const p = event.payload;
    await tx.query(
      `UPDATE worlds SET require_merge = $2, allow_actions = $3, protection_revision = $4
        WHERE id = $1 AND protection_revision < $4`,
      [event.world_id, p.requireMerge, p.allowActions, p.revision],
    );
  }
}

/** This service's side of the world lifecycle saga (see worldProvisioning). */
export default fp(
  async (app: FastifyInstance) => {
    const provisioning = worldProvisioning('data', app.topicPrefix, {
      provision: provisionWorld,
      drop: dropWorld,
      position: tagPosition,
      // A deleted tag's name no longer resolves (its request and deletion arrive in order here).
      untag: async (tx, worldId, { tag, request }) => {
        await tx.query('DELETE FROM world_tags WHERE world_id = $1 AND name = $2 AND request_id = $3', [
          worldId,
          tag,
          request,
        ]);
      },
    });
    const answerChecker = checkerAnswers(app);
    app.addConsumer({
      name: 'data-worlds',
      topics: ['onto.worlds'],
      apply: async (tx, events) => {
        await provisioning(tx, events);
        await applyProtection(tx, events);
        await applyRetention(tx, events);
        await answerChecker(tx, events);
      },
    });
  },
  { name: 'onto-data-worlds', dependencies: ['onto-consumers'] },
);
