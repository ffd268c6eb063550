import type { Segment } from './refs.js';

/** A world read at a commit for a diff (numbers throughout: "now" is pinned to data's head). */
export interface Point {
  world: string;
  commit: number;
  chain: Segment[];
}

/** Where the writes that can differ between two points are, and which point sees them. */
export interface Interval {
  world: string;
  lo: number;
  hi: number;
  side: 'from' | 'to';
}

/**
 * The seq intervals of each world of either chain that the two points read differently: (lower
 * commit, higher commit] when both chains read the world, all it wrote when only one does.
 */
export function intervals(a: Point, b: Point): Interval[] {
  const upTo = (p: Point, world: string) => p.chain.find((s) => s.world === world)?.upTo ?? null;
  const worlds = [...new Set([...a.chain, ...b.chain].map((s) => s.world))];
  const out: Interval[] = [];
  for (const world of worlds) {
    const ua = upTo(a, world);
    const ub = upTo(b, world);
    if (ua !== null && ub !== null) {
      if (ua !== ub) out.push({ world, lo: Math.min(ua, ub), hi: Math.max(ua, ub), side: ub > ua ? 'to' : 'from' });
    } else if (ua !== null) out.push({ world, lo: 0, hi: ua, side: 'from' });
    else if (ub !== null) out.push({ world, lo: 0, hi: ub, side: 'to' });
  }
  return out;
}
