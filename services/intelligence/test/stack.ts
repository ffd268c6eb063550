import { dataStack } from '../../data/test/stack.js';

export { expectProblem } from '../../data/test/stack.js';

/** control, data and intelligence on a topic prefix of their own (see dataStack). */
export const intelligenceStack = (
  opts: {
    partitions?: number;
    dataEnv?: Record<string, string>;
    controlEnv?: Record<string, string>;
    intelligenceEnv?: Record<string, string>;
  } = {},
) => dataStack({ ...opts, intelligence: true });

export type IntelligenceStack = Awaited<ReturnType<typeof intelligenceStack>>;
