import { type ObjectType, type Queryable, setOwn } from '@onto/shared';
import { pointValue, seriesNamesOf, seriesOf } from './model.js';
import { latestPoints } from './repository.js';

/**
 * The latest point of each series of an object, for its own read; undefined when its type
 * declares none. `at`: read up the chain at that commit (null: now), for a fork or a read at a ref.
 */
export async function latestSeries(
  db: Queryable,
  worldId: string,
  type: ObjectType,
  pk: string,
  at?: { commit: number | null },
): Promise<Record<string, { time: string; value: unknown }> | undefined> {
  if (seriesNamesOf(type).length === 0) return undefined;
  const latest: Record<string, { time: string; value: unknown }> = {};
  for (const { series: name, point } of await latestPoints(db, worldId, type.apiName, pk, at)) {
    const series = seriesOf(type, name);
    if (series) setOwn(latest, name, { time: point.time, value: pointValue(series, point.num, point.label) });
  }
  return latest;
}
