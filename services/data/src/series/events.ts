import { newEvent, type OutboxMessage, TOPICS } from '@onto/shared';
import { type Origin, originHeaders } from '../events.js';
import { SERIES_LIMITS } from './model.js';

/**
 * `series.points.written` on onto.series.points, keyed by world + type + pk so that an object's
 * points stay in one partition, in order: one event per written batch of one series, split in
 * events of at most SERIES_LIMITS.pointsPerEvent points. `producer_seq` is the batch's data seq.
 */
export function seriesPointsWritten(
  w: {
    worldId: string;
    type: string;
    pk: string;
    series: string;
    seq: number;
    schemaVersion: number;
    writtenAt: string;
  },
  points: { time: string; value: unknown }[],
  origin: Origin,
): OutboxMessage[] {
  const key = TOPICS['onto.series.points'].key({ worldId: w.worldId, objectType: w.type, pk: w.pk });
  const messages: OutboxMessage[] = [];
  for (let i = 0; i < points.length; i += SERIES_LIMITS.pointsPerEvent) {
    messages.push({
      event: newEvent({
        type: 'series.points.written',
        worldId: w.worldId,
        key,
        version: w.seq,
        producer: 'data',
        producerSeq: w.seq,
        causedBy: origin.causedBy,
        payload: {
          type: w.type,
          pk: w.pk,
          series: w.series,
          points: points.slice(i, i + SERIES_LIMITS.pointsPerEvent),
          actor: origin.actor,
          requestId: origin.requestId,
          schemaVersion: w.schemaVersion,
          writtenAt: w.writtenAt,
        },
      }),
      key,
      headers: originHeaders(origin),
    });
  }
  return messages;
}
