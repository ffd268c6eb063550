export { buildTestService, type TestService } from './app.js';
export { createEmptyTestDatabase, createTestDatabase, type TestDatabase } from './databases.js';
export { dockerAvailable, ENV, endpointsFromEnv, type TestEndpoints, testEndpoints } from './env.js';
export { type EventuallyOptions, eventually } from './eventually.js';
export { testIdentityEnv, testIdentityKeys, testKeyEncryptionKey } from './identity-key.js';
export { createTestTopics, testBroker, testLogger } from './kafka.js';
export { blockedOnLock } from './locks.js';
export { type PrivateKafka, startPrivateKafka } from './private-kafka.js';
export { committedToEnd, consumedPastSentinel } from './sentinel.js';
