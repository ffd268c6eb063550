/**
 * The merge base (docs/adr/0037): the newest common ancestor of two worlds, counting forks and
 * earlier merges in either direction. Pure: the lineage is read by the repository.
 */

/** A point of a world: control's schema version, data's write sequence, intelligence's definitions. */
export interface Point {
  world: string;
  schemaVersion: number;
  dataSeq: number;
  definitions: number;
}

export interface Lineage {
  /** Each world's fork point in its parent, or absent for a world made from nothing. */
  forks: Map<string, Point>;
  /** MERGED merges: the source point read and the target point after the apply. */
  merges: { source: Point; result: Point }[];
}

/**
 * Ancestors of a world at a data sequence: world → the greatest point reachable. The head itself
 * is at +Infinity, so a head is never chosen over a recorded point of the same world.
 */
export function ancestors(lineage: Lineage, world: string): Map<string, Point> {
  const found = new Map<string, Point>();
  const head: Point = {
    world,
    schemaVersion: Number.POSITIVE_INFINITY,
    dataSeq: Number.POSITIVE_INFINITY,
    definitions: 0,
  };
  const visit = (point: Point) => {
    const known = found.get(point.world);
    if (known && known.dataSeq >= point.dataSeq) return;
    found.set(point.world, point);
    const fork = lineage.forks.get(point.world);
    // A fork's base precedes every write of the child, so it is an ancestor of every point of it.
    if (fork) visit(fork);
    for (const m of lineage.merges) {
      // A merge into this world, finished at or before this point, brings its source's history in.
      if (m.result.world === point.world && m.result.dataSeq <= point.dataSeq) visit(m.source);
    }
  };
  visit(head);
  return found;
}

/**
 * The base: per world on both sides the smaller point, then the one with the greatest data
 * sequence (a criss-cross takes the newest candidate, not a recursive merge). Null: no history shared.
 */
export function mergeBase(lineage: Lineage, source: string, target: string): Point | null {
  const a = ancestors(lineage, source);
  const b = ancestors(lineage, target);
  let best: Point | null = null;
  for (const [world, pa] of a) {
    const pb = b.get(world);
    if (!pb) continue;
    const common = pa.dataSeq <= pb.dataSeq ? pa : pb;
    if (!Number.isFinite(common.dataSeq)) continue;
    if (!best || common.dataSeq > best.dataSeq) best = common;
  }
  return best;
}
