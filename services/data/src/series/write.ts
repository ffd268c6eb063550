import { laneOf, Outbox, TOPICS, uuidv7 } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { commitTime, type Origin, seriesPointsTemplate } from '../events.js';
import { notProvisioned } from '../schema/lookup.js';
import { worldContext } from '../worlds/context.js';
import { inWorldTransaction } from '../worlds/locks.js';
import { refuseProtected } from '../worlds/protection.js';
import { seriesPointsWritten } from './events.js';
import { pointValue, SERIES_LIMITS, type SeriesDef } from './model.js';
import { ensurePartitions, nextSeq, seriesIds, seriesKey, writePoints } from './repository.js';

/**
 * The points of one series in a batch, as columns: no object per point. `refs` say where each
 * came from (the index of a point in a body, or the line of a bulk body), for faults.
 */
export interface SeriesPoints {
  type: string;
  pk: string;
  series: SeriesDef;
  times: string[];
  nums: (number | null)[];
  labels: (string | null)[];
  refs: number[];
  /** While true, each point's instant came after the one before (stored instants sort as text). */
  ordered: boolean;
  /** series_keys.id, once the batch is written. */
  id: number;
}

/** Checked points of many series, grouped by series as they come. */
export class SeriesBatch {
  readonly groups = new Map<string, SeriesPoints>();
  size = 0;
  private last: SeriesPoints | undefined;

  /** @param pathOf the JSON path of a point's ref, for faults found while writing (a new day too many). */
  constructor(readonly pathOf: (ref: number) => string) {}

  add(
    type: string,
    pk: string,
    series: SeriesDef,
    time: string,
    num: number | null,
    label: string | null,
    ref: number,
  ) {
    // Consecutive points of one series (the usual shape of a body) skip the map.
    let g = this.last;
    if (!g || g.pk !== pk || g.series !== series || g.type !== type) {
      const key = seriesKey(type, pk, series.name);
      g = this.groups.get(key);
      if (!g) {
        g = { type, pk, series, times: [], nums: [], labels: [], refs: [], ordered: true, id: 0 };
        this.groups.set(key, g);
      }
      this.last = g;
    }
    const n = g.times.length;
    if (n > 0 && time <= (g.times[n - 1] as string)) g.ordered = false;
    g.times.push(time);
    g.nums.push(num);
    g.labels.push(label);
    g.refs.push(ref);
    this.size++;
  }
}

/** The last point of each instant wins, in time order: what a batch writes of a series. */
function settle(g: SeriesPoints): void {
  if (g.ordered) return;
  const lastAt = new Map<string, number>();
  for (let i = 0; i < g.times.length; i++) lastAt.set(g.times[i] as string, i);
  const order = [...lastAt.values()].sort((a, b) => ((g.times[a] as string) < (g.times[b] as string) ? -1 : 1));
  g.times = order.map((i) => g.times[i] as string);
  g.nums = order.map((i) => g.nums[i] ?? null);
  g.labels = order.map((i) => g.labels[i] ?? null);
  g.refs = order.map((i) => g.refs[i] as number);
  g.ordered = true;
}

/** A point as its event spells it: canonical JSON of {time, value}, value of the series' type. */
function pointJson(series: SeriesDef, time: string, num: number | null, label: string | null): string {
  const t = series.value;
  const value =
    t === 'boolean'
      ? num === null
        ? 'null'
        : num !== 0
          ? 'true'
          : 'false'
      : typeof t === 'object'
        ? JSON.stringify(label)
        : num === null
          ? 'null'
          : String(num);
  return `{"time":"${time}","value":${value}}`;
}

/**
 * Writes one batch in one transaction (all or nothing): the last point of each instant wins
 * within the batch; a repeated point changes nothing; the points that changed are announced,
 * one event per series and SERIES_LIMITS.pointsPerEvent points, as outbox bundles
 * (docs/adr/0028, docs/adr/0034).
 */
export interface SeriesWritten {
  written: number;
  unchanged: number;
  seq: number;
}

export async function writeSeriesBatch(
  app: FastifyInstance,
  w: { worldId: string; schemaVersion: number; origin: Origin },
  batch: SeriesBatch,
  /** Runs in the batch's transaction with its result: the request's audit record. */
  also?: (tx: pg.PoolClient, written: SeriesWritten) => Promise<void>,
): Promise<SeriesWritten> {
  const groups = [...batch.groups.values()];
  let total = 0;
  const days: { time: string; path: string }[] = [];
  for (const g of groups) {
    settle(g);
    total += g.times.length;
    let day = '';
    for (let i = 0; i < g.times.length; i++) {
      const time = g.times[i] as string;
      if (day !== '' && time.startsWith(day)) continue;
      day = time.slice(0, 10);
      days.push({ time, path: batch.pathOf(g.refs[i] as number) });
    }
  }
  if (total === 0) {
    const none = { written: 0, unchanged: 0, seq: 0 };
    if (also) await inWorldTransaction(app.pg, w.worldId, (tx) => also(tx, none));
    return none;
  }
  await ensurePartitions(app.pg, days);
  return inWorldTransaction(app.pg, w.worldId, async (tx) => {
    const ctx = await worldContext(tx, w.worldId);
    if (!ctx.provisioned) throw notProvisioned(w.worldId);
    refuseProtected(w.worldId, ctx.protection);
    const ids = await seriesIds(
      tx,
      w.worldId,
      groups.map((g) => ({ type: g.type, pk: g.pk, series: g.series.name })),
    );
    for (const g of groups) g.id = ids.get(seriesKey(g.type, g.pk, g.series.name)) as number;
    // Concurrent batches meet their points in one order: by series, then time.
    groups.sort((a, b) => a.id - b.id);
    const seq = await nextSeq(tx, w.worldId);
    const changed = await writePoints(tx, w.worldId, seq, groups);
    const written = await announce(tx, app.topicPrefix, { ...w, seq }, groups, changed);
    const result = { written, unchanged: total - written, seq };
    await also?.(tx, result);
    return result;
  });
}

/** The batch's events, from the points that changed (all of them when `changed` is 'all'); answers how many points. */
async function announce(
  tx: pg.ClientBase,
  topicPrefix: string,
  w: { worldId: string; schemaVersion: number; origin: Origin; seq: number },
  groups: SeriesPoints[],
  changed: 'all' | Map<SeriesPoints, number[]>,
): Promise<number> {
  const first = groups.find((g) => changed === 'all' || (changed.get(g)?.length ?? 0) > 0);
  if (!first) return 0;
  // A real event of the batch first: its constant fields are checked as every event's are.
  const [sample] = seriesPointsWritten(
    {
      worldId: w.worldId,
      type: first.type,
      pk: first.pk,
      series: first.series.name,
      seq: w.seq,
      schemaVersion: w.schemaVersion,
      writtenAt: await commitTime(tx),
    },
    [
      {
        time: first.times[0] as string,
        value: pointValue(first.series, first.nums[0] ?? null, first.labels[0] ?? null),
      },
    ],
    w.origin,
  );
  if (!sample) throw new Error('no sample event');
  const template = seriesPointsTemplate(sample, new Date());
  const bundles = new Outbox(tx, topicPrefix).bundles({ sample, parts: template.parts });
  const per = SERIES_LIMITS.pointsPerEvent;
  let points = 0;
  for (const g of groups) {
    const picked = changed === 'all' ? undefined : changed.get(g);
    const count = picked ? picked.length : changed === 'all' ? g.times.length : 0;
    if (count === 0) continue;
    points += count;
    const key = TOPICS['onto.series.points'].key({ worldId: w.worldId, objectType: g.type, pk: g.pk });
    const fields = {
      key: JSON.stringify(key),
      type: JSON.stringify(g.type),
      pk: JSON.stringify(g.pk),
      series: JSON.stringify(g.series.name),
    };
    for (let from = 0; from < count; from += per) {
      let text = '[';
      for (let k = from; k < Math.min(count, from + per); k++) {
        const i = picked ? (picked[k] as number) : k;
        text += `${k === from ? '' : ','}${pointJson(g.series, g.times[i] as string, g.nums[i] ?? null, g.labels[i] ?? null)}`;
      }
      text += ']';
      const eventId = uuidv7();
      bundles.event(eventId, key, laneOf(key));
      for (const field of template.fields) {
        bundles.value(field === 'eventId' ? `"${eventId}"` : field === 'points' ? text : fields[field]);
      }
    }
  }
  await bundles.write();
  return points;
}
