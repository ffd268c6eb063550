/** data's merge steps as functions, for the merge benchmark (bench/merge.ts) to time without the relays. */

export { cutCommit } from '../storage/commit.js';
export { applyMerge } from './apply.js';
export { planMerge } from './plan.js';
