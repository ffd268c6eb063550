/**
 * Inherited objects in intelligence (issue 16, ADR 33 decision 2), side by side in one run: GET of
 * an object's derived values in a depth-3 fork, where the object is inherited from the base (read
 * through the chain at the fork points), against the same GET in the unforked base — and the same
 * for an object the fork wrote itself (its own row: the unforked path). Goal as data's (ADR 23):
 * ≤ 1.5×.
 *
 * The base's objects are written through data (PUT, a few at a time) and evaluated by
 * intelligence as usual; the forks go through control and are READY when data and intelligence
 * provisioned them. Small sizes only (default 1,000 objects).
 *
 *   ./onto bench intelligence-fork-reads [objects]      (default 1000)
 */
import { fmt, until } from './lib/harness.js';
import { benchStack, call, Item } from './lib/stack.js';

const objects = Number(process.argv[2] ?? 1_000);
const samples = Number(process.env.BENCH_SAMPLES ?? 300);
const stack = await benchStack({ intelligence: true });
const { control, data, intelligence, token } = stack;
if (!intelligence) throw new Error('no intelligence');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const ratio = (a: number, b: number) => (a / b).toFixed(2);

const derived = (world: string, pk: string) =>
  call(intelligence.url, 'GET', `/v1/worlds/${world}/objects/Item/${pk}/derived`, token) as Promise<{
    derived: { doubled: { value: number } };
  }>;

async function put(world: string, i: number, amount = i) {
  await call(data.url, 'PUT', `/v1/worlds/${world}/objects/Item/item-${i}`, token, {
    properties: { id: `item-${i}`, amount },
  });
}

/** Forks through control; returns once control says READY. */
async function fork(id: string, from: string) {
  await call(control.url, 'POST', '/v1/worlds', token, { id, from: { world: from } });
  await until(
    `${id} READY`,
    async () => (await call(control.url, 'GET', `/v1/worlds/${id}`, token)).status === 'READY',
    120_000,
    20,
  );
}

/** Median ms of each of two reads, interleaved so that the machine's load falls on both alike. */
async function sideBySide(a: (i: number) => Promise<unknown>, b: (i: number) => Promise<unknown>) {
  const ta: number[] = [];
  const tb: number[] = [];
  for (let i = 0; i < samples; i++) {
    for (const [f, out] of [
      [a, ta],
      [b, tb],
    ] as const) {
      const t = performance.now();
      await f(i);
      out.push(performance.now() - t);
    }
  }
  return [median(ta), median(tb)] as const;
}

try {
  await stack.world('base', { objectTypes: { Item } });
  await call(intelligence.url, 'PUT', '/v1/worlds/base/derived-properties/doubled', token, {
    objectType: 'Item',
    expression: 'self.amount * 2',
  });
  let t = performance.now();
  for (let i = 0; i < objects; i += 20) {
    await Promise.all(Array.from({ length: Math.min(20, objects - i) }, (_, k) => put('base', i + k + 1)));
  }
  await until(
    'values in the base',
    async () =>
      (await derived('base', `item-${objects}`).catch(() => undefined))?.derived.doubled.value === objects * 2,
    300_000,
    50,
  );
  console.log(`setup: ${fmt(objects)} objects written and evaluated in ${fmt((performance.now() - t) / 1000, 1)} s`);

  // A depth-3 fork, each level writing one object of its own (so each is a real branch).
  t = performance.now();
  await fork('d1', 'base');
  await put('d1', 1, 7);
  await fork('d2', 'd1');
  await put('d2', 2, 7);
  await fork('d3', 'd2');
  await put('d3', 3, 7);
  await until(
    'd3 evaluated its own object',
    async () => (await derived('d3', 'item-3').catch(() => undefined))?.derived.doubled.value === 14,
    60_000,
    20,
  );
  console.log(`three forks READY and written in ${fmt((performance.now() - t) / 1000, 1)} s`);

  const inherited = (i: number) => `item-${4 + ((i * 7919) % (objects - 3))}`;
  const check = await derived('d3', inherited(0));
  if (check.derived.doubled.value !== Number(inherited(0).slice(5)) * 2) {
    throw new Error(`d3 answered ${JSON.stringify(check)} for ${inherited(0)}`);
  }
  await sideBySide(
    (i) => derived('base', inherited(i)),
    (i) => derived('d3', inherited(i)),
  ); // warm-up
  const [base, fork3] = await sideBySide(
    (i) => derived('base', inherited(i)),
    (i) => derived('d3', inherited(i)),
  );
  console.log(
    `GET derived, inherited object: depth-3 fork ${fmt(fork3, 2)} ms, unforked ${fmt(base, 2)} ms: ratio ${ratio(fork3, base)} (goal ≤ 1.5)`,
  );
  const [baseOwn, forkOwn] = await sideBySide(
    () => derived('base', 'item-3'),
    () => derived('d3', 'item-3'),
  );
  console.log(
    `GET derived, the fork's own object: depth-3 fork ${fmt(forkOwn, 2)} ms, unforked ${fmt(baseOwn, 2)} ms: ratio ${ratio(forkOwn, baseOwn)}`,
  );
} finally {
  await stack.close();
}
