import type { Broker, OutgoingMessage, Producer } from '../kafka/broker.js';
import { type EventuallyOptions, eventually } from './eventually.js';

/**
 * Waits until consumer group `groupId` has committed every record `topic` holds: handled, or
 * parked, or dead-lettered, and never to be delivered to it again. Only a record produced after
 * this call can still reach the group.
 */
export async function committedToEnd(
  broker: Broker,
  groupId: string,
  topic: string,
  options: EventuallyOptions = {},
): Promise<void> {
  const admin = await broker.admin();
  try {
    let lag = Number.NaN;
    await eventually(
      () => `${groupId} to commit the end of ${topic} (lag ${lag})`,
      async () => {
        lag = await admin.consumerLag(groupId, topic);
        return lag === 0;
      },
      options,
    );
  } finally {
    await admin.disconnect();
  }
}

/**
 * "Nothing else arrives", without sleeping: sends `sentinels` to `topic` after the records under
 * test (a sentinel with the key of a record under test lands behind it on its partition), then
 * waits until group `groupId` has committed past them. Anything the records under test were going
 * to cause in that group — a redelivery, a late duplicate — has happened by then.
 */
export async function consumedPastSentinel(
  broker: Broker,
  producer: Producer,
  { groupId, topic, sentinels }: { groupId: string; topic: string; sentinels: OutgoingMessage[] },
  options: EventuallyOptions = {},
): Promise<void> {
  await producer.send([{ topic, messages: sentinels }]);
  await committedToEnd(broker, groupId, topic, options);
}
