import { fnv1a32 } from '@onto/shared';

/**
 * A live subscriber's position: for every partition of every topic it follows, the offset of the
 * next record it has not seen. It is the SSE `id:` of each event, as
 * `<tag>.<offset>.<offset>…` (base 36, topics in catalogue order, partitions in order), where the
 * tag binds it to its world, its topics and their partition counts: a position of another world
 * or subscription is refused rather than misread. Any instance reading the same topics can resume
 * from it (docs/adr/0059).
 */
export class PositionCodec {
  private readonly tag: string;

  constructor(
    world: string,
    /** Indices into LIVE_TOPIC_NAMES, ascending. */
    readonly topics: readonly number[],
    /** Partition count of each live topic, by index. */
    readonly partitions: readonly number[],
  ) {
    const counts = topics.map((t) => partitions[t] ?? 0);
    this.tag = fnv1a32(`${world}|${topics.join(',')}|${counts.join(',')}`).toString(36);
  }

  encode(vector: readonly (readonly number[])[]): string {
    let id = this.tag;
    for (const t of this.topics) {
      const offsets = vector[t] ?? [];
      for (let p = 0; p < (this.partitions[t] ?? 0); p++) id += `.${(offsets[p] ?? 0).toString(36)}`;
    }
    return id;
  }

  /** The vector an id encodes (every live topic, unfollowed ones empty), or undefined if it is not one of these. */
  decode(id: string): number[][] | undefined {
    const parts = id.split('.');
    if (parts[0] !== this.tag) return undefined;
    const vector: number[][] = this.partitions.map(() => []);
    let i = 1;
    for (const t of this.topics) {
      const offsets = vector[t] as number[];
      for (let p = 0; p < (this.partitions[t] ?? 0); p++) {
        const part = parts[i++];
        if (part === undefined || !/^[0-9a-z]{1,12}$/.test(part)) return undefined;
        offsets.push(Number.parseInt(part, 36));
      }
    }
    return i === parts.length ? vector : undefined;
  }
}
