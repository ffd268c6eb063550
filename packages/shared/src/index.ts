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
export { inTransactionTogether, queryTogether, type Statement, type TransactionOutcome } from './db/pipeline.js';
export { postgresPlugin } from './db/postgres.js';
export { type Isolation, inTransaction } from './db/transaction.js';
export { BODY_LIMITS } from './http/body-limits.js';
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
export { CheckFailed, healthPlugin, type ReadinessCheck, withTimeout } from './http/health.js';
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
export * from './http/problem.js';
export {
  lsnBytes,
  type ReadOptions,
  type ReplicaOptions,
  replicaOptions,
  replicasPlugin,
  walPositionOf,
} from './http/read-replicas.js';
export { runService } from './http/server.js';
export { everyInProcess, type InProcessTask } from './in-process.js';
export { historyMetrics } from './jobs/history-metrics.js';
export { pinCommit } from './jobs/history-pins.js';
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
export { type AclRule, kafkaAclsCommands, producedTopics, serviceAcls } from './kafka/acls.js';
export type * from './kafka/broker.js';
export * from './kafka/events/index.js';
export { createKafkaBroker, type KafkaBrokerOptions, type KafkaSasl } from './kafka/kafkajs-broker.js';
export { kafkaPlugin } from './kafka/plugin.js';
export * from './kafka/topics.js';
export { identityReplicaMigrations, kernelMigrations } from './kernel-migrations.js';
export {
  type AuditEntry,
  type AuditedRequest,
  type AuditResult,
  auditMessage,
  recordAudit,
} from './messaging/audit.js';
export { canonicalJson } from './messaging/canonical-json.js';
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
} from './messaging/consumer.js';
export {
  type ConsumerStatus,
  consumersPlugin,
  type ServiceConsumerOptions,
  type ServiceRecordConsumerOptions,
} from './messaging/consumers-plugin.js';
export { DeadLetters, type DeadRecord, DLQ_HEADERS } from './messaging/dead-letters.js';
export * from './messaging/envelope.js';
export {
  type EventHandlers,
  type EventOf,
  type EventPayload,
  type EventReadings,
  eventHandlers,
  eventReadings,
  isEvent,
} from './messaging/event-handlers.js';
export { ConcurrencyConflictError, isConflict, type OccOptions, StaleWriteError, withOcc } from './messaging/occ.js';
export * from './messaging/outbox.js';
export { outboxOldestAgeSeconds } from './messaging/outbox-age.js';
export { runPeriodically } from './messaging/periodic.js';
export { type OutboxPluginOptions, outboxPlugin } from './messaging/plugin.js';
export { ProcessedCache } from './messaging/processed-cache.js';
export { RecordConsumer, type RecordConsumerOptions } from './messaging/record-consumer.js';
export * from './messaging/record-limits.js';
export { inboxReleaseRoute, releaseDeadLettered } from './messaging/redrive.js';
export * from './messaging/relay.js';
export { outboxSetAsideRoutes } from './messaging/set-aside-routes.js';
export { upsertIfNewer } from './messaging/upsert.js';
export { UUID_V7, uuidv7 } from './messaging/uuidv7.js';
export {
  type ProvisionOutcome,
  type TagRequest,
  type WorldHooks,
  type WorldOrigin,
  worldProvisioning,
} from './messaging/world-provisioning.js';
export * from './ontology/actions.js';
export * from './ontology/own.js';
export * from './ontology/replica.js';
export * from './ontology/schema.js';
export * from './ontology/values.js';
export * from './ontology/where.js';
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
