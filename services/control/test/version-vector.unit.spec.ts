import { newEvent, type ReceivedEvent } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import { recordingPositions } from '../src/worlds/consistency.js';

const received = (
  type: 'storage.position' | 'storage.schema.updated' | 'intelligence.position' | 'world.provisioned',
  world: string,
  payload: object,
): ReceivedEvent =>
  ({
    event: newEvent({
      type,
      worldId: world,
      key: world,
      version: 1,
      producer: type.startsWith('intelligence.') ? 'intelligence' : 'data',
      producerSeq: 1,
      payload: payload as never,
    }),
  }) as ReceivedEvent;

describe('recording position announcements', () => {
  it('records nothing for a batch without announcements', () => {
    expect(recordingPositions([received('world.provisioned', 'w', { service: 'data' })])).toBeNull();
  });

  it('folds the announcements of one world and service into one row, keeping the highest of each', () => {
    const statement = recordingPositions([
      received('storage.position', 'w', { seq: 40 }),
      received('storage.schema.updated', 'w', { world: 'w', version: 3, previousVersion: 2, indexes: [] }),
      received('storage.position', 'w', { seq: 12 }),
      received('intelligence.position', 'w', { schemaVersion: 2, dataSeq: 30 }),
      received('intelligence.position', 'v', { schemaVersion: 1, dataSeq: 7 }),
    ]);
    expect(statement?.text).toMatch(/greatest\(world_positions\.schema_version, excluded\.schema_version\)/);
    expect(statement?.values).toEqual([
      ['w', 'w', 'v'],
      ['data', 'intelligence', 'intelligence'],
      [3, 2, 1],
      [40, 30, 7],
    ]);
  });
});
