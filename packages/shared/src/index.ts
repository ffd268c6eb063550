export * from './auth/events.js';
export * from './auth/identity-signature.js';
export {
  type AuthPluginOptions,
  actorOf,
  authPlugin,
  principalOf,
  type RevocationView,
  refusal,
} from './auth/plugin.js';
export {
  IdentityReplica,
  type IdentityReplicaOptions,
  type IdentityReplicaPluginOptions,
  identityReplicaPlugin,
} from './auth/replica.js';
export * from './auth/tokens.js';
export * from './auth/types.js';
export { type Backoff, backoffDelay, equalJitter, type RetryOptions, retryWithBackoff } from './backoff.js';
export { BODY_LIMITS } from './config/body-limits.js';
export {
  ConfigError,
  kafkaSaslConfigSchema,
  kafkaSaslOf,
  loadConfig,
  readReplicaConfigSchema,
  replicaConfigSchema,
  serviceConfigSchema,
} from './config/load.js';
export { advisoryLockKey, fnv1a32, lockSpace } from './db/advisory-lock.js';
export { copyField, copyLines } from './db/copy.js';
export { type Listening, listenWithReconnect } from './db/listen.js';
export { appliedVersion, type MigrationTrack, migrate } from './db/migrate.js';
export { ConcurrencyConflictError, isConflict, type OccOptions, StaleWriteError, withOcc } from './db/occ.js';
export { inTransactionTogether, queryTogether, type Statement, type TransactionOutcome } from './db/pipeline.js';
export { postgresPlugin } from './db/postgres.js';
export { type Isolation, inTransaction } from './db/transaction.js';
export { upsertIfNewer } from './db/upsert.js';
export * from './errors/problem.js';
export { type AclRule, kafkaAclsCommands, producedTopics, serviceAcls } from './events/acls.js';
export * from './events/envelope.js';
export * from './events/index.js';
export { AT_PATTERN, awaitApplied, consistencyToken, instantTime } from './http/consistency.js';
export { decodeCursor, encodeCursor } from './http/cursor.js';
export { type Example, withExamples } from './http/examples.js';
export {
  CAUSED_BY_PATTERN,
  CONSISTENCY_TOKEN_PATTERN,
  Headers,
  IDEMPOTENCY_KEY_PATTERN,
  type IfMatchRule,
  ifMatch,
  ifMatchPattern,
  requestHeader,
} from './http/headers.js';
export { healthPlugin } from './http/health.js';
export {
  installBoundedJsonParser,
  JSON_MAX_DEPTH,
  jsonTooDeepAt,
  parseBoundedJson,
  TOO_DEEP,
} from './http/json-depth.js';
export { objectSetSchemas, PageTokens } from './http/object-sets.js';
export { metricsPlugin } from './http/observability.js';
export {
  type BaseServiceConfig,
  documentedJsonBody,
  fastifyOptions,
  OPTIONAL_BODY,
  type PlatformOptions,
  platformPlugin,
} from './http/platform.js';
export {
  lsnBytes,
  type ReadOptions,
  type ReplicaOptions,
  replicaOptions,
  replicasPlugin,
  walPositionOf,
} from './http/read-replicas.js';
export { runService } from './http/server.js';
export { UUID_V7, uuidv7 } from './ids/uuidv7.js';
export { everyInProcess, type InProcessTask } from './in-process.js';
export {
  type ApplyEffects,
  type ConsumerFaults,
  type DeferralPolicy,
  InboxConsumer,
  type InboxConsumerOptions,
  isInfrastructureError,
  type PassThrough,
  type PrepareEffects,
  pruneInbox,
  type ReceivedEvent,
  uuidv7Floor,
} from './inbox/consumer.js';
export { DeadLetters, type DeadRecord, DLQ_HEADERS } from './inbox/dead-letters.js';
export {
  type EventHandlers,
  type EventOf,
  type EventPayload,
  type EventReadings,
  eventHandlers,
  eventReadings,
  isEvent,
} from './inbox/handlers.js';
export {
  type ConsumerStatus,
  consumersPlugin,
  type ServiceConsumerOptions,
  type ServiceRecordConsumerOptions,
} from './inbox/plugin.js';
export { ProcessedCache } from './inbox/processed-cache.js';
export { RecordConsumer, type RecordConsumerOptions } from './inbox/record-consumer.js';
export { releaseDeadLettered } from './inbox/release.js';
export { historyMetrics } from './jobs/history-metrics.js';
export { pinCommit } from './jobs/history-pins.js';
export { runPeriodically } from './jobs/periodic.js';
export { type JobsPluginOptions, jobsPlugin } from './jobs/plugin.js';
export {
  type EnqueueOptions,
  enqueueJob,
  type JobContext,
  type JobHandler,
  type JobOutcome,
  JobRunner,
  type JobRunnerOptions,
  type TaskOptions,
} from './jobs/runner.js';
export { canonicalJson } from './json/canonical.js';
export type * from './kafka/broker.js';
export { createKafkaBroker, type KafkaBrokerOptions, type KafkaSasl } from './kafka/kafkajs-broker.js';
export { kafkaPlugin } from './kafka/plugin.js';
export * from './kafka/topics.js';
export { identityReplicaMigrations, kernelMigrations } from './kernel-migrations.js';
export { type OutboxPluginOptions, outboxPlugin } from './messaging/plugin.js';
export * from './ontology/actions.js';
export * from './ontology/own.js';
export * from './ontology/replica.js';
export * from './ontology/schema.js';
export * from './ontology/values.js';
export * from './ontology/where.js';
export { outboxOldestAgeSeconds } from './outbox/age.js';
export {
  type AuditEntry,
  type AuditedRequest,
  type AuditResult,
  auditMessage,
  recordAudit,
} from './outbox/audit.js';
export { BUNDLE_MAX, OutboxBundles } from './outbox/bundle.js';
export * from './outbox/outbox.js';
export { outboxPositions } from './outbox/positions.js';
export * from './outbox/record-limits.js';
export * from './outbox/relay.js';
export { CheckFailed, type ReadinessCheck, withTimeout } from './readiness.js';
export { createRedis, redisPlugin } from './redis/redis.js';
export {
  applyTraced,
  contextOfTraceparent,
  endSpan,
  setTracingEnabled,
  traceIdsOf,
  traceparentFor,
  traceparentOf,
  tracerOf,
  tracingEnabled,
} from './tracing/context.js';
export { traceRequests } from './tracing/http.js';
export { exportingWanted, FileSpanExporter, spanLine, startTracing, type TracingOptions } from './tracing/sdk.js';
export {
  type ProvisionOutcome,
  type TagRequest,
  type WorldHooks,
  type WorldOrigin,
  worldProvisioning,
} from './worlds/provisioning.js';
