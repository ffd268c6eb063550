import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import {
  type Broker,
  type Consumer,
  everyInProcess,
  type IncomingMessage,
  type InProcessTask,
  physicalTopic,
} from '@onto/shared';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { type EventFilter, filterSubject } from './filter.js';
import { PositionCodec } from './position.js';
import { LIVE_TOPIC_INDEX, LIVE_TOPIC_NAMES, LIVE_TOPICS } from './topics.js';

/** One record of a live topic as the hub keeps it for its subscribers. */
interface LiveRecord {
  /** The event's id (ce_id): a record a relay sent again has the same one. */
  id: string;
  topic: number;
  partition: number;
  offset: number;
  /** The record's Kafka timestamp (ms). */
  at: number;
  world: string;
  type: string;
  value: string;
  headers: Record<string, string>;
  /** What the record is counted as against LIVE_REPLAY_BYTES (its strings and an estimate of the rest). */
  bytes: number;
  /** The structured CloudEvent, made on first use and shared by every subscriber. */
  cloudEvent?: string;
  subject?: Record<string, unknown>;
}

/** data's own topics, whose events carry data's commit as producer_seq. */
const DATA_TOPICS = new Set(['objects', 'links', 'series'].map((t) => LIVE_TOPIC_NAMES.indexOf(t as never)));
/** How long a connection must not drain before a subscriber past its bound is dropped. */
const STALL_MS = 1000;
const PRODUCER_SEQ = /"producer_seq":([0-9]+)/;
/**
 * What a record costs beside its strings: the record object, its headers object and the strings'
 * own headers (measured with V8 at about 0.6 KB for the dozen headers a change event carries),
 * and the event id's entry in the set of ids.
 */
const RECORD_OVERHEAD_BYTES = 700;

/** A record's size as LIVE_REPLAY_BYTES counts it: its value, its headers, and the overhead above. */
function recordBytes(value: string, headers: Record<string, string>): number {
  let bytes = RECORD_OVERHEAD_BYTES + value.length;
  for (const [name, header] of Object.entries(headers)) bytes += name.length + header.length;
  return bytes;
}

/** The event as a structured-mode CloudEvent: the envelope is `data`, the attributes from its ce_* headers. */
export function structuredCloudEvent(headers: Record<string, string>, value: string): string {
  const attributes: Record<string, string> = {};
  for (const name of ['specversion', 'id', 'type', 'source', 'time', 'subject', 'dataschema']) {
    const header = `ce_${name}`;
    // own-key: name is one of the CloudEvents attribute names above, never input
    if (Object.hasOwn(headers, header)) attributes[name] = headers[header] as string;
  }
  attributes.datacontenttype = 'application/json';
  const head = JSON.stringify(attributes);
  return `${head.slice(0, -1)},"data":${value}}`;
}

export interface LiveHubOptions {
  broker: Broker;
  prefix: string;
  logger: Logger;
  registry: Registry;
  /** Records kept for resumption, at most this many… */
  replayEvents: number;
  /** …taking at most this many bytes (recordBytes, plus each CloudEvent made for subscribers)… */
  replayBytes: number;
  /** …and at most this old (s); a new instance first reads this far back. */
  replaySeconds: number;
  /** Records a subscriber whose connection does not drain may fall behind before it is closed. */
  bufferEvents: number;
  heartbeatMs: number;
  authCheckMs: number;
}

export interface SubscriptionSpec {
  world: string;
  /** Indices into LIVE_TOPIC_NAMES, ascending. */
  topics: number[];
  types: Set<string> | null;
  filter: EventFilter | null;
  /** Resume after this position (a decoded Last-Event-ID). */
  after?: number[][];
  /** Start after this data commit (data's topics; the others from the oldest record kept). */
  fromCommit?: number;
  /** Resolves to why the subscriber may no longer read (token expired or revoked, role lost), or null. */
  authorised: () => Promise<string | null>;
}

/** Why a subscription cannot start here: the position is older than what is kept. */
export class PositionGone extends Error {}

/**
 * Every instance of data reads the live topics from Kafka with a reader of its own (a group per
 * instance that commits nothing) and keeps the newest records in a ring: subscribers read that
 * ring, each at its own cursor, so one slow connection costs the others nothing. A position is a
 * vector of Kafka offsets, the same on every instance, so a subscriber resumes anywhere the ring
 * still holds it (docs/adr/0059).
 */
export class LiveHub {
  private consumer: Consumer | undefined;
  /** Partition count of each live topic. */
  partitions: number[] = [];
  /** Per topic and partition: the next offset not yet read. */
  private head: number[][] = [];
  /** Per topic and partition: the ring holds every record from this offset on. */
  private floor: number[][] = [];
  private ring: LiveRecord[] = [];
  /**
   * The ids of the events the ring holds: a relay that resends a batch (at least once, ADR 62)
   * puts an event on its partition twice, and a subscriber must get it once. The copy is skipped
   * as it is read, the same on every instance whose ring holds the first one.
   */
  private readonly ids = new Set<string>();
  private ringStart = 0;
  /** The bytes the records from ringStart on count for (LIVE_REPLAY_BYTES). */
  private ringBytes = 0;
  /** The absolute index of ring[ringStart]. */
  private base = 0;
  /** Data commits at or below this may have left the ring (undefined: none seen yet). */
  private dataSeqFloor: number | undefined;
  private readonly subscriptions = new Set<LiveSubscription>();
  private timers: InProcessTask[] = [];
  private readonly metrics;
  private startedAt: Promise<void> | undefined;
  /** True while append pumps a batch to the subscribers (pumped() does not evict then). */
  private appending = false;

  constructor(readonly opts: LiveHubOptions) {
    this.metrics = {
      subscribers: new Gauge({
        name: 'onto_live_subscribers',
        help: 'open live event streams (SSE) on this instance',
        registers: [opts.registry],
      }),
      sent: new Counter({
        name: 'onto_live_events_sent_total',
        help: 'events written to live event streams',
        registers: [opts.registry],
      }),
      duplicates: new Counter({
        name: 'onto_live_duplicates_skipped_total',
        help: 'records the live reader skipped because the ring already held their event (a relay sent it again)',
        registers: [opts.registry],
      }),
      overflows: new Counter({
        name: 'onto_live_overflows_total',
        help: 'live streams closed because the client fell too far behind',
        registers: [opts.registry],
      }),
      ring: new Gauge({
        name: 'onto_live_replay_records',
        help: 'records this instance keeps for resuming live streams',
        registers: [opts.registry],
        collect: () => {
          this.metrics.ring.set(this.ring.length - this.ringStart);
        },
      }),
      ringBytes: new Gauge({
        name: 'onto_live_replay_bytes',
        help: 'bytes (as LIVE_REPLAY_BYTES counts them) of the records this instance keeps for resuming live streams',
        registers: [opts.registry],
        collect: () => {
          this.metrics.ringBytes.set(this.ringBytes);
        },
      }),
    };
  }

  /** The absolute index of the oldest record kept. */
  get first(): number {
    return this.base;
  }

  get end(): number {
    return this.base + this.ring.length - this.ringStart;
  }

  at(index: number): LiveRecord | undefined {
    return this.ring[this.ringStart + index - this.base];
  }

  /** Starts reading; resolves once the reader has its partitions' start (not once caught up). */
  start(): Promise<void> {
    this.startedAt ??= this.run();
    return this.startedAt;
  }

  private async run(): Promise<void> {
    const admin = await this.opts.broker.admin();
    const since = Date.now() - this.opts.replaySeconds * 1000;
    const startAt: { topic: string; partition: number; offset: string }[] = [];
    try {
      for (const [t, name] of LIVE_TOPIC_NAMES.entries()) {
        const topic = physicalTopic(this.opts.prefix, LIVE_TOPICS[name]);
        const offsets = await admin.offsetsAt(topic, since);
        this.partitions[t] = offsets.length;
        this.head[t] = offsets.map((o) => Number(o.offset));
        this.floor[t] = [...(this.head[t] as number[])];
        for (const o of offsets) startAt.push({ topic, partition: o.partition, offset: o.offset });
      }
    } finally {
      await admin.disconnect();
    }
    this.consumer = await this.opts.broker.consumer({
      groupId: `${this.opts.prefix}data-live-${randomUUID()}`,
      topics: LIVE_TOPIC_NAMES.map((t) => physicalTopic(this.opts.prefix, LIVE_TOPICS[t])),
      startAt,
      maxWaitTimeMs: 100,
      sessionTimeoutMs: 10_000,
      partitionsConsumedConcurrently: 1,
    });
    await this.consumer.run(async (batch) => this.append(batch.messages));
    // This instance's own subscribers: per-process loops, not jobs.
    this.timers.push(
      everyInProcess('live heartbeats', this.opts.heartbeatMs, () => this.heartbeat()),
      everyInProcess(
        'live authorisation checks',
        this.opts.authCheckMs,
        () => this.checkAuthorisations(),
        this.opts.logger,
      ),
      everyInProcess('live rechecks', 1000, () => this.recheck()),
    );
  }

  async stop(): Promise<void> {
    for (const t of this.timers) t.stop();
    this.timers = [];
    for (const s of this.subscriptions) s.close('the service is shutting down');
    await this.consumer?.disconnect();
  }

  private append(messages: IncomingMessage[]): void {
    const prefixLength = this.opts.prefix.length;
    for (const m of messages) {
      const t = LIVE_TOPIC_INDEX.get(m.topic.slice(prefixLength));
      if (t === undefined || m.value === null) continue;
      const heads = this.head[t] as number[];
      const offset = Number(m.offset);
      // A partition read again after a rebalance: what the ring already holds is skipped.
      if (offset < (heads[m.partition] ?? 0)) continue;
      heads[m.partition] = offset + 1;
      const headers = m.headers;
      const type = headers.ce_type;
      const key = m.key ?? headers.ce_subject;
      if (type === undefined || key === undefined) continue;
      const id = headers.ce_id ?? headers['onto-event-id'] ?? `${t}/${m.partition}/${offset}`;
      if (this.ids.has(id)) {
        this.metrics.duplicates.inc();
        continue;
      }
      this.ids.add(id);
      const value = m.value.toString('utf8');
      if (DATA_TOPICS.has(t) && this.dataSeqFloor === undefined) {
        const seq = PRODUCER_SEQ.exec(value)?.[1];
        if (seq !== undefined) this.dataSeqFloor = Number(seq) - 1;
      }
      const bytes = recordBytes(value, headers);
      this.ringBytes += bytes;
      this.ring.push({
        id,
        topic: t,
        partition: m.partition,
        offset,
        at: Number(m.timestamp),
        world: decodeURIComponent(key.slice(0, key.indexOf('/') >>> 0)),
        type,
        value,
        headers: { ...headers },
        bytes,
      });
    }
    // Subscribers that keep up get the batch before the bounds evict from it (a batch may be larger
    // than the ring); one that is behind and loses its next record gets overflow (checkBehind).
    this.appending = true;
    try {
      for (const s of this.subscriptions) s.pump();
    } finally {
      this.appending = false;
    }
    this.evict();
  }

  /**
   * After a pump outside append (a subscriber opening, draining or rechecked): the CloudEvents it
   * made count against the byte bound, so the ring gives back what it took over the bound at once,
   * not at the next recheck. During append the subscribers get the whole batch first.
   */
  pumped(): void {
    if (!this.appending && this.ringBytes > this.opts.replayBytes) this.evict();
  }

  /** The structured CloudEvent of a record, made once for every subscriber and counted against the byte bound. */
  cloudEventOf(r: LiveRecord): string {
    if (r.cloudEvent === undefined) {
      r.cloudEvent = structuredCloudEvent(r.headers, r.value);
      // Subscribers read only records the ring holds (pump checks its cursor against first).
      r.bytes += r.cloudEvent.length;
      this.ringBytes += r.cloudEvent.length;
    }
    return r.cloudEvent;
  }

  private evict(): void {
    const oldest = Date.now() - this.opts.replaySeconds * 1000;
    let start = this.ringStart;
    while (start < this.ring.length) {
      const r = this.ring[start] as LiveRecord;
      if (
        this.ring.length - start <= this.opts.replayEvents &&
        this.ringBytes <= this.opts.replayBytes &&
        r.at >= oldest
      )
        break;
      this.ringBytes -= r.bytes;
      this.ids.delete(r.id);
      (this.floor[r.topic] as number[])[r.partition] = r.offset + 1;
      if (DATA_TOPICS.has(r.topic)) {
        const seq = Number(PRODUCER_SEQ.exec(r.value)?.[1] ?? 0);
        if (seq > (this.dataSeqFloor ?? 0)) this.dataSeqFloor = seq;
      }
      start++;
    }
    this.base += start - this.ringStart;
    this.ringStart = start;
    if (this.ringStart > 4096 && this.ringStart * 2 > this.ring.length) {
      this.ring = this.ring.slice(this.ringStart);
      this.ringStart = 0;
    }
    for (const s of this.subscriptions) s.checkBehind();
  }

  private recheck(): void {
    this.evict();
    for (const s of this.subscriptions) s.recheck();
  }

  /** The codec of a subscription's positions; undefined until the hub knows the partitions. */
  codec(world: string, topics: number[]): PositionCodec | undefined {
    return this.partitions.length === LIVE_TOPIC_NAMES.length
      ? new PositionCodec(world, topics, this.partitions)
      : undefined;
  }

  /**
   * Opens a subscription on a response whose head is written. Throws PositionGone when it asks to
   * resume from a position the ring no longer holds.
   */
  subscribe(spec: SubscriptionSpec, codec: PositionCodec, res: ServerResponse): LiveSubscription {
    this.checkResumable(spec);
    let vector: number[][];
    let cursor: number;
    if (spec.after) {
      vector = spec.after.map((v) => [...v]);
      cursor = this.base;
    } else if (spec.fromCommit !== undefined) {
      vector = this.floor.map((v) => [...v]);
      cursor = this.base;
    } else {
      vector = this.head.map((v) => [...v]);
      cursor = this.end;
    }
    const s = new LiveSubscription(this, spec, codec, res, vector, cursor);
    this.subscriptions.add(s);
    this.metrics.subscribers.set(this.subscriptions.size);
    res.on('close', () => {
      s.close();
      this.subscriptions.delete(s);
      this.metrics.subscribers.set(this.subscriptions.size);
    });
    s.pump();
    return s;
  }

  /** Throws PositionGone when the subscription asks to start before what the ring holds. */
  checkResumable(spec: Pick<SubscriptionSpec, 'topics' | 'after' | 'fromCommit'>): void {
    if (spec.after) {
      for (const t of spec.topics) {
        const floors = this.floor[t] as number[];
        for (let p = 0; p < floors.length; p++) {
          if ((spec.after[t]?.[p] ?? 0) < (floors[p] ?? 0)) throw new PositionGone();
        }
      }
    } else if (spec.fromCommit !== undefined) {
      if (this.dataSeqFloor !== undefined && spec.fromCommit < this.dataSeqFloor) throw new PositionGone();
    }
  }

  /** Forgets a start that failed, for the next attempt. */
  reset(): void {
    this.startedAt = undefined;
    this.consumer = undefined;
    this.partitions = [];
  }

  countSent(n: number): void {
    this.metrics.sent.inc(n);
  }

  countOverflow(): void {
    this.metrics.overflows.inc();
  }

  private heartbeat(): void {
    for (const s of this.subscriptions) s.heartbeat();
  }

  private async checkAuthorisations(): Promise<void> {
    await Promise.all([...this.subscriptions].map((s) => s.checkAuthorised()));
  }
}

/** One SSE connection: its own cursor in the hub's ring and its own position vector. */
export class LiveSubscription {
  private blocked = false;
  private blockedSince = 0;
  private closed = false;

  constructor(
    private readonly hub: LiveHub,
    private readonly spec: SubscriptionSpec,
    private readonly codec: PositionCodec,
    private readonly res: ServerResponse,
    /** Per topic and partition, the next offset this subscriber has not seen. */
    private readonly position: number[][],
    private cursor: number,
  ) {}

  /** Writes what the ring holds past the cursor until the connection pushes back. */
  pump(): void {
    if (this.blocked || this.closed) return;
    const { world, types, filter, fromCommit } = this.spec;
    const topics = this.codec.topics;
    let sent = 0;
    // Records it has not seen have left the ring: it can only resume from its position, elsewhere.
    if (this.cursor < this.hub.first) {
      this.overflow();
      return;
    }
    while (this.cursor < this.hub.end) {
      const r = this.hub.at(this.cursor++) as LiveRecord;
      if (!topics.includes(r.topic)) continue;
      const offsets = this.position[r.topic] as number[];
      if (r.offset < (offsets[r.partition] ?? 0)) continue;
      offsets[r.partition] = r.offset + 1;
      if (r.world !== world || (types !== null && !types.has(r.type))) continue;
      if (fromCommit !== undefined && DATA_TOPICS.has(r.topic)) {
        if (Number(PRODUCER_SEQ.exec(r.value)?.[1] ?? 0) <= fromCommit) continue;
      }
      if (filter !== null) {
        r.subject ??= filterSubject((JSON.parse(r.value) as { payload?: unknown }).payload);
        if (!filter(r.subject)) continue;
      }
      const cloudEvent = this.hub.cloudEventOf(r);
      sent++;
      const more = this.res.write(`id: ${this.codec.encode(this.position)}\nevent: ${r.type}\ndata: ${cloudEvent}\n\n`);
      if (!more) {
        this.blocked = true;
        this.blockedSince = Date.now();
        (this.res.socket ?? this.res).once('drain', () => this.unblock());
        break;
      }
    }
    if (sent > 0) {
      this.hub.countSent(sent);
      this.hub.pumped();
    }
    this.checkBehind();
  }

  private unblock(): void {
    if (!this.blocked) return;
    this.blocked = false;
    this.pump();
  }

  /** Called every second: a drain the subscription missed is noticed here. */
  recheck(): void {
    if (this.blocked && (this.res.socket?.writableLength ?? 0) === 0) this.unblock();
    else this.checkBehind();
  }

  /**
   * A subscriber whose connection has not drained for a second while it is more than its bound
   * behind (or the ring is about to lose its next record) gets `overflow` with its position and is
   * closed. One that drains, however far behind a burst left it, goes on at its own pace.
   */
  checkBehind(): void {
    if (this.closed || !this.blocked) return;
    const lost = this.cursor < this.hub.first;
    const stalled =
      Date.now() - this.blockedSince >= STALL_MS && this.hub.end - this.cursor > this.hub.opts.bufferEvents;
    if (!lost && !stalled) return;
    this.overflow();
  }

  private overflow(): void {
    this.hub.countOverflow();
    this.finish(
      'overflow',
      JSON.stringify({
        lastEventId: this.codec.encode(this.position),
        detail: 'this client fell too far behind; reconnect with Last-Event-ID to go on from here',
      }),
    );
  }

  heartbeat(): void {
    if (!this.closed && !this.blocked) this.res.write(': heartbeat\n\n');
  }

  async checkAuthorised(): Promise<void> {
    if (this.closed) return;
    let why: string | null;
    try {
      why = await this.spec.authorised();
    } catch (error) {
      why = (error as Error).message;
    }
    if (why !== null) this.finish('closed', JSON.stringify({ detail: why }));
  }

  /** Writes a last event (past any backpressure) and ends the stream; a client that never reads is cut off. */
  private finish(event: string, data: string): void {
    if (this.closed) return;
    this.closed = true;
    this.res.end(`event: ${event}\ndata: ${data}\n\n`);
    setTimeout(() => this.res.destroy(), 10_000).unref();
  }

  close(reason?: string): void {
    if (reason !== undefined) this.finish('closed', JSON.stringify({ detail: reason }));
    this.closed = true;
  }
}
