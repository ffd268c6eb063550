export * from './asyncapi.js';
export * from './cloudevents.js';
export * from './compatibility.js';
export * from './contract.js';
export { EVENT_PAYLOADS, MERGE_CONFLICT_TYPES, MERGE_STRATEGIES } from './payloads.js';
