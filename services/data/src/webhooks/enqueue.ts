import { type ApplyEffects, canonicalJson } from '@onto/shared';
import { compileEventFilter, type EventFilter, filterSubject } from '../live/filter.js';
import { structuredCloudEvent } from '../live/hub.js';

interface Subscriber {
  name: string;
  events: Set<string>;
  filter: EventFilter | null;
}

/** Wakes this instance's deliverer once a batch of deliveries is committed (others hear the NOTIFY). */
export const WEBHOOK_CHANNEL = 'onto_webhook_deliveries';

/**
 * Consumer `data-webhooks` (docs/adr/0060): each event of the live topics becomes one delivery per
 * active webhook of its world that wants its type and whose filter it passes, written in the
 * transaction that records the event in the inbox, so that an event is queued exactly once per
 * webhook whatever Kafka redelivers.
 */
export const enqueueDeliveries: ApplyEffects = async (tx, events) => {
  const worlds = [...new Set(events.map((e) => e.event.world_id))];
  const { rows } = await tx.query<{ world_id: string; name: string; events: string[]; filter: string[] }>(
    'SELECT world_id, name, events, filter FROM webhooks WHERE active AND world_id = ANY($1::text[])',
    [worlds],
  );
  if (rows.length === 0) return;
  const byWorld = new Map<string, Subscriber[]>();
  for (const r of rows) {
    const compiled = r.filter.length > 0 ? compileEventFilter(r.filter, '/where') : null;
    const list = byWorld.get(r.world_id) ?? [];
    list.push({
      name: r.name,
      events: new Set(r.events),
      // Checked when the webhook was written: a filter that no longer compiles matches nothing.
      filter: compiled === null ? null : 'errors' in compiled ? () => false : compiled,
    });
    byWorld.set(r.world_id, list);
  }
  const cols = {
    world: [] as string[],
    webhook: [] as string[],
    id: [] as string[],
    type: [] as string[],
    key: [] as string[],
    body: [] as string[],
  };
  for (const received of events) {
    const { event, message } = received;
    const subscribers = byWorld.get(event.world_id);
    if (!subscribers) continue;
    let body: string | undefined;
    let subject: Record<string, unknown> | undefined;
    for (const s of subscribers) {
      if (!s.events.has(event.type)) continue;
      if (s.filter) {
        subject ??= filterSubject(event.payload);
        if (!s.filter(subject)) continue;
      }
      body ??= structuredCloudEvent(message.headers, canonicalJson(event));
      cols.world.push(event.world_id);
      cols.webhook.push(s.name);
      cols.id.push(event.event_id);
      cols.type.push(event.type);
      cols.key.push(message.key ?? event.key);
      cols.body.push(body);
    }
  }
  if (cols.id.length === 0) return;
  await tx.query(
    // Each delivery names the one before it in its lane (the batch's previous one of its key, else
    // the lane's newest row): the deliverer waits on that one row (docs/adr/0082).
    `WITH batch AS (
       SELECT nextval(pg_get_serial_sequence('webhook_deliveries', 'id')) AS id, b.*
         FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY
              AS b(world_id, webhook, event_id, event_type, ordering_key, body, n)
     )
     INSERT INTO webhook_deliveries (id, world_id, webhook, event_id, event_type, ordering_key, body, after_id)
     OVERRIDING SYSTEM VALUE
     SELECT b.id, b.world_id, b.webhook, b.event_id, b.event_type, b.ordering_key, b.body,
            coalesce(lag(b.id) OVER (PARTITION BY b.world_id, b.webhook, b.ordering_key ORDER BY b.n),
                     (SELECT e.id FROM webhook_deliveries e
                       WHERE e.world_id = b.world_id AND e.webhook = b.webhook AND e.ordering_key = b.ordering_key
                       ORDER BY e.id DESC LIMIT 1))
       FROM batch b ORDER BY b.n
     ON CONFLICT (world_id, webhook, event_id) DO NOTHING`,
    [cols.world, cols.webhook, cols.id, cols.type, cols.key, cols.body],
  );
  await tx.query(`SELECT pg_notify('${WEBHOOK_CHANNEL}', '')`);
};
