export * from './asyncapi.js';
export * from './cloudevents.js';
export * from './compatibility.js';
export * from './contract.js';
export { AUDIT_RESULTS, EVENT_PAYLOADS, MERGE_CONFLICT_TYPES, MERGE_STRATEGIES } from './payloads.js';
