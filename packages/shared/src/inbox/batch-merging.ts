import type { Logger } from 'pino';
import type { ReceivedEvent } from './options.js';

/** Most events one merged transaction takes (see InboxConsumerOptions.mergeBatches). */
const MERGED_EVENTS_MAX = 2000;

/** A merged transaction failed: each of its batches is run again alone. */
class MergeFailed extends Error {
  override readonly name = 'MergeFailed';
}

interface Waiting {
  events: ReceivedEvent[];
  /** The mergeKeys of its events. */
  keys: Set<string>;
  resolve: (ids: string[]) => void;
  reject: (error: unknown) => void;
}

/** Runs the events of one transaction; answers the ids now certainly done. */
type Process = (events: ReceivedEvent[]) => Promise<string[]>;

/**
 * Merges the batches that are ready into one transaction, so long as they share no key with a
 * transaction in flight (InboxConsumerOptions.mergeBatches, mergeKey; ADR 18). A merged
 * transaction that fails commits nothing; its batches are then run again one by one.
 */
export class BatchMerger {
  /** Batches waiting for a transaction in flight that holds one of their keys. */
  private waiting: Waiting[] = [];
  /** The merge keys of the transactions in flight. */
  private readonly busy = new Set<string>();

  constructor(
    private readonly process: Process,
    private readonly mergeKey: ((item: ReceivedEvent) => string) | undefined,
    private readonly log: Logger,
  ) {}

  /** process(events), in one transaction with every batch that is ready and whose keys are free. */
  async run(events: ReceivedEvent[]): Promise<string[]> {
    const keyOf = this.mergeKey;
    const keys = new Set(keyOf ? events.map(keyOf) : ['']);
    try {
      return await new Promise<string[]>((resolve, reject) => {
        this.waiting.push({ events, keys, resolve, reject });
        this.startMerged();
      });
    } catch (error) {
      if (!(error instanceof MergeFailed)) throw error;
      return this.process(events);
    }
  }

  /**
   * Starts a transaction for the waiting batches whose keys are free, in arrival order: a batch
   * whose key is held by a transaction in flight, or by an earlier batch left waiting, waits
   * (so that batches of one key keep their order), and so does one past the size cap.
   */
  private startMerged(): void {
    const group: Waiting[] = [];
    const rest: Waiting[] = [];
    const taken = new Set<string>();
    const held = new Set<string>();
    let size = 0;
    for (const w of this.waiting) {
      const free = [...w.keys].every((k) => !this.busy.has(k) && !held.has(k));
      if (free && (group.length === 0 || size + w.events.length <= MERGED_EVENTS_MAX)) {
        group.push(w);
        size += w.events.length;
        for (const k of w.keys) taken.add(k);
      } else {
        rest.push(w);
        for (const k of w.keys) held.add(k);
      }
    }
    if (group.length === 0) return;
    this.waiting = rest;
    for (const k of taken) this.busy.add(k);
    void this.runMerged(group).finally(() => {
      for (const k of taken) this.busy.delete(k);
      this.startMerged();
    });
    // What was left behind for size alone, with keys still free, starts beside it.
    if (rest.some((w) => [...w.keys].every((k) => !this.busy.has(k)))) this.startMerged();
  }

  private async runMerged(group: Waiting[]): Promise<void> {
    if (group.length === 1) {
      const only = group[0] as Waiting;
      await this.process(only.events).then(only.resolve, only.reject);
      return;
    }
    try {
      const done = new Set(await this.process(group.flatMap((g) => g.events)));
      for (const g of group) g.resolve(g.events.map((e) => e.event.event_id).filter((id) => done.has(id)));
    } catch (error) {
      this.log.debug({ err: error, batches: group.length }, 'merged batches failed; running each alone');
      for (const g of group) g.reject(new MergeFailed(String(error)));
    }
  }
}
