/**
 * The cost of a CEL expression (docs/adr/0021): estimated when it is defined, charged while it
 * runs. @bufbuild/cel has neither, so both count the same unit: one node of the syntax tree
 * evaluated once. Everything outside a comprehension is evaluated at most once, so what can cost
 * more than the expression's size is the comprehensions' iterations; each iteration is charged
 * the nodes of its condition and step (not counting inner comprehensions' bodies, which charge
 * their own iterations), so an estimate and a run agree whenever the lists are as long as assumed.
 */
import { CelScalar, celFunc } from '@bufbuild/cel';

/** Units one evaluation may spend, and the most an expression's estimate may come to. */
export const EVALUATION_BUDGET = 20_000;

/**
 * The bound of one evaluation, checked every few iterations: a safety net for what units do not
 * see (operations on large values). Spent when both the wall clock and the process's CPU time
 * passed it: a descheduled process, or the compiler's threads warming up, alone must not turn a
 * valid expression into an error. Within its units an evaluation takes 1–12 ms of CPU.
 */
export const EVALUATION_TIME_LIMIT_MS = 40;

/** How long a run of evaluations keeps the event loop before giving it a turn. */
export const EVALUATION_SLICE_MS = 5;

/**
 * A pause for loops that evaluate many objects: lets the event loop run (I/O, timers) before the
 * first evaluation and whenever `EVALUATION_SLICE_MS` have passed since the last turn; else
 * resolves at once.
 */
export function evaluationSlices(ms = EVALUATION_SLICE_MS): () => Promise<void> | undefined {
  // The first pause yields: a loop starts right after the query that loaded its objects, and the
  // parsing of those rows must not share a turn with the first evaluations.
  let since = Number.NEGATIVE_INFINITY;
  return () => {
    if (performance.now() - since < ms) return undefined;
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        since = performance.now();
        resolve();
      }),
    );
  };
}

/**
 * How long the estimate assumes a list is when only the running object can say (a property, a
 * derived value, a function's result); list and map literals count their entries.
 */
export const ASSUMED_LIST_SIZE = 100;

/** The name of the function the planner's copy of an expression calls each iteration; no user can name it. */
export const BUDGET_FUNCTION = 'onto.budget';

// What the walk needs of the parser's syntax tree (the messages of @bufbuild/cel-spec).
export interface Node {
  id?: bigint;
  exprKind:
    | { case: 'constExpr'; value: unknown }
    | { case: 'identExpr'; value: { name: string } }
    | { case: 'selectExpr'; value: { operand?: Node } }
    | { case: 'callExpr'; value: { target?: Node; function: string; args: Node[] } }
    | { case: 'listExpr'; value: { elements: Node[] } }
    | {
        case: 'structExpr';
        value: { entries: { keyKind: { case: string | undefined; value?: unknown }; value?: Node }[] };
      }
    | {
        case: 'comprehensionExpr';
        value: {
          iterRange?: Node;
          accuInit?: Node;
          loopCondition?: Node;
          loopStep?: Node;
          result?: Node;
        };
      }
    | { case: undefined; value?: undefined };
}

/** The nodes a node's children are, comprehensions' loop bodies left out. */
function children(node: Node | undefined, loopBodies: boolean): Node[] {
  if (!node) return [];
  const k = node.exprKind;
  switch (k.case) {
    case 'selectExpr':
      return k.value.operand ? [k.value.operand] : [];
    case 'callExpr':
      return [...(k.value.target ? [k.value.target] : []), ...k.value.args];
    case 'listExpr':
      return k.value.elements;
    case 'structExpr':
      return k.value.entries.flatMap((e) => [
        ...(e.keyKind.case === 'mapKey' ? [e.keyKind.value as Node] : []),
        ...(e.value ? [e.value] : []),
      ]);
    case 'comprehensionExpr': {
      const c = k.value;
      const outer = [c.iterRange, c.accuInit, c.result];
      return (loopBodies ? [...outer, c.loopCondition, c.loopStep] : outer).filter((n): n is Node => n !== undefined);
    }
    default:
      return [];
  }
}

/** Nodes evaluated once per evaluation of `node`: its own, without comprehensions' loop bodies. */
function shallowSize(node: Node | undefined): number {
  if (!node) return 0;
  let n = 1;
  for (const child of children(node, false)) n += shallowSize(child);
  return n;
}

/** What one iteration of a comprehension is charged. */
function iterationWeight(c: { loopCondition?: Node; loopStep?: Node }): number {
  return 1 + shallowSize(c.loopCondition) + shallowSize(c.loopStep);
}

interface Estimate {
  cost: number;
  /** Entries, when the node's value is a list or map. */
  size: number;
}

function estimate(node: Node | undefined): Estimate {
  if (!node) return { cost: 0, size: 0 };
  const k = node.exprKind;
  if (k.case === 'comprehensionExpr') {
    const c = k.value;
    const range = estimate(c.iterRange);
    const init = estimate(c.accuInit);
    const cond = estimate(c.loopCondition);
    const step = estimate(c.loopStep);
    const result = estimate(c.result);
    // Inner comprehensions of the body cost their own iterations, on every outer iteration.
    const perIteration =
      iterationWeight(c) + cond.cost - shallowSize(c.loopCondition) + step.cost - shallowSize(c.loopStep);
    return { cost: 1 + range.cost + init.cost + result.cost + range.size * perIteration, size: range.size };
  }
  const parts = children(node, true).map(estimate);
  const cost = 1 + parts.reduce((sum, p) => sum + p.cost, 0);
  switch (k.case) {
    case 'listExpr':
      return { cost, size: k.value.elements.length };
    case 'structExpr':
      return { cost, size: k.value.entries.length };
    case 'callExpr':
      // A concatenation is as long as its parts; a ternary as its longer branch.
      if (k.value.function === '_+_') return { cost, size: parts.reduce((sum, p) => sum + p.size, 0) };
      if (k.value.function === '_?_:_') return { cost, size: Math.max(parts[1]?.size ?? 0, parts[2]?.size ?? 0) };
      return { cost, size: ASSUMED_LIST_SIZE };
    default:
      return { cost, size: ASSUMED_LIST_SIZE };
  }
}

/** The units an evaluation of the expression is estimated to spend. */
export function estimateCost(root: Node): number {
  return estimate(root).cost;
}

/**
 * The expression as it is planned: each comprehension's loop condition becomes
 * `onto.budget(condition, weight)`, which charges the iteration and ends every loop (false) once
 * the budget is spent. Rewrites the tree in place.
 */
export function instrument(node: Node | undefined): void {
  if (!node) return;
  for (const child of children(node, true)) instrument(child);
  const k = node.exprKind;
  if (k.case !== 'comprehensionExpr' || !k.value.loopCondition) return;
  const weight = iterationWeight(k.value);
  const condition = k.value.loopCondition;
  k.value.loopCondition = {
    id: condition.id ?? 0n,
    exprKind: {
      case: 'callExpr',
      value: {
        function: BUDGET_FUNCTION,
        args: [
          condition,
          {
            id: condition.id ?? 0n,
            exprKind: { case: 'constExpr', value: { constantKind: { case: 'int64Value', value: BigInt(weight) } } },
          },
        ],
      },
    },
  } as Node;
}

const cpuMicros = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
// Reading the CPU clock costs about half a microsecond, an iteration one to three.
const CLOCK_EVERY = 16;

let remaining = 0;
let deadline = 0;
let cpuDeadline = 0;
let untilClock = 0;
let spent: 'units' | 'time' | undefined;

/** Starts one evaluation's account. */
export function openBudget(units = EVALUATION_BUDGET, ms = EVALUATION_TIME_LIMIT_MS) {
  remaining = units;
  deadline = performance.now() + ms;
  cpuDeadline = cpuMicros() + ms * 1000;
  untilClock = CLOCK_EVERY;
  spent = undefined;
}

/** Why the evaluation since `openBudget` ran out, if it did (its result then means nothing). */
export function budgetSpent(): string | undefined {
  if (spent === 'units') return `the evaluation exceeded its budget of ${EVALUATION_BUDGET} steps`;
  if (spent === 'time') return `the evaluation exceeded its time limit of ${EVALUATION_TIME_LIMIT_MS} ms`;
  return undefined;
}

export const budgetFunction = celFunc(
  BUDGET_FUNCTION,
  [CelScalar.BOOL, CelScalar.INT],
  CelScalar.BOOL,
  (condition, weight) => {
    if (spent) return false;
    remaining -= Number(weight);
    if (remaining < 0) spent = 'units';
    else if (--untilClock === 0) {
      untilClock = CLOCK_EVERY;
      if (performance.now() > deadline && cpuMicros() > cpuDeadline) spent = 'time';
    }
    return spent ? false : condition;
  },
);
