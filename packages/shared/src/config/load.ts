import { type Static, type TObject, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { type KafkaSasl, SASL_MECHANISMS } from '../kafka/kafkajs-broker.js';

/** A missing or malformed environment variable; the message names every one of them. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(readonly problems: readonly { variable: string; message: string }[]) {
    super(`invalid configuration: ${problems.map((p) => `${p.variable}: ${p.message}`).join('; ')}`);
  }
}

/**
 * Validates `env` against a schema whose property names are the environment variable names.
 * Strings are converted to the declared types; defaults fill what is absent; unknown
 * variables are ignored (the environment carries much that is not ours).
 */
export function loadConfig<S extends TObject>(schema: S, env: NodeJS.ProcessEnv): Static<S> {
  // Keys are the schema's own property names; null-prototype so a read of one never finds Object's.
  const picked: Record<string, unknown> = Object.create(null);
  for (const key of Object.keys(schema.properties)) {
    const raw = env[key];
    // An empty variable is treated as unset, as shells and compose files often produce them.
    if (raw !== undefined && raw !== '') picked[key] = raw;
  }
  const problems: { variable: string; message: string }[] = [];
  for (const [key, raw] of Object.entries(picked)) {
    // Conversion would truncate "80.5" to 80; an integer variable must be written as one.
    const type = (schema.properties[key] as { type?: string } | undefined)?.type;
    if (type === 'integer' && !/^-?\d+$/.test(String(raw))) {
      problems.push({ variable: key, message: `Expected integer (got ${describe(raw)})` });
    }
  }
  const withDefaults = Value.Default(schema, picked);
  const converted = Value.Convert(schema, withDefaults);
  for (const error of Value.Errors(schema, converted)) {
    const variable = error.path.split('/')[1] || requiredName(error);
    problems.push({ variable, message: `${error.message} (got ${describe(picked[variable])})` });
  }
  if (problems.length > 0) throw new ConfigError(dedupe(problems));
  return converted as Static<S>;
}

function requiredName(error: { schema: unknown; value: unknown }): string {
  return String((error.schema as { required?: string[] }).required?.[0] ?? '(unknown)');
}

function describe(value: unknown): string {
  return value === undefined ? 'nothing' : JSON.stringify(value);
}

function dedupe(problems: { variable: string; message: string }[]) {
  const first = new Map<string, { variable: string; message: string }>();
  for (const p of problems) if (!first.has(p.variable)) first.set(p.variable, p);
  return [...first.values()];
}

/** Schema pieces every service shares; the names are the environment variables. */
export const LogLevel = Type.Union(
  ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
  { default: 'info' },
);

export const BrokerList = Type.String({
  pattern: '^[^,\\s:]+:\\d{1,5}(,[^,\\s:]+:\\d{1,5})*$',
  description: 'Kafka bootstrap servers, host:port[,host:port…]',
});

export const PostgresUrl = Type.String({ pattern: '^postgres(ql)?://', description: 'PostgreSQL URL' });
export const RedisUrl = Type.String({ pattern: '^rediss?://', description: 'Redis URL' });

/** SASL for the Kafka clients (docs/adr/0024): the service's own user; all three or none. */
export function kafkaSaslConfigSchema() {
  return Type.Object({
    KAFKA_SASL_MECHANISM: Type.Optional(
      Type.Union(
        SASL_MECHANISMS.map((m) => Type.Literal(m)),
        { description: 'SASL mechanism of the Kafka clients; unset: anonymous' },
      ),
    ),
    KAFKA_SASL_USERNAME: Type.Optional(Type.String({ minLength: 1, description: "the service's Kafka user" })),
    KAFKA_SASL_PASSWORD: Type.Optional(Type.String({ minLength: 1, description: "the Kafka user's password" })),
  });
}

export interface KafkaSaslConfig {
  KAFKA_SASL_MECHANISM?: KafkaSasl['mechanism'] | undefined;
  KAFKA_SASL_USERNAME?: string | undefined;
  KAFKA_SASL_PASSWORD?: string | undefined;
}

/** The Kafka clients' SASL credentials, or undefined for anonymous ones; a partial set is refused. */
export function kafkaSaslOf(config: KafkaSaslConfig): KafkaSasl | undefined {
  const { KAFKA_SASL_MECHANISM: mechanism, KAFKA_SASL_USERNAME: username, KAFKA_SASL_PASSWORD: password } = config;
  if (mechanism === undefined && username === undefined && password === undefined) return undefined;
  const missing = Object.entries({
    KAFKA_SASL_MECHANISM: mechanism,
    KAFKA_SASL_USERNAME: username,
    KAFKA_SASL_PASSWORD: password,
  })
    .filter(([, value]) => value === undefined)
    .map(([variable]) => ({ variable, message: 'required when any KAFKA_SASL_ variable is set' }));
  if (missing.length > 0 || !mechanism || !username || !password) throw new ConfigError(missing);
  return { mechanism, username, password };
}

export function serviceConfigSchema(defaultPort: number) {
  return Type.Object({
    HOST: Type.String({ default: '0.0.0.0', minLength: 1 }),
    PORT: Type.Integer({ minimum: 1, maximum: 65535, default: defaultPort }),
    LOG_LEVEL: LogLevel,
    DATABASE_URL: PostgresUrl,
    REDIS_URL: RedisUrl,
    KAFKA_BROKERS: BrokerList,
    KAFKA_CLIENT_ID: Type.Optional(Type.String({ minLength: 1 })),
    ...kafkaSaslConfigSchema().properties,
    ONTO_TOPIC_PREFIX: Type.String({
      default: '',
      pattern: '^[a-zA-Z0-9._-]*$',
      description: 'Prefix for every topic name; lets test runs and tenants share a broker',
    }),
    ONTO_CONSOLE_ORIGIN: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'Origins (comma-separated, or *) whose pages may call this service: the console served by control (default http://127.0.0.1:4001,http://localhost:4001)',
      }),
    ),
    SHUTDOWN_TIMEOUT_MS: Type.Integer({ minimum: 100, maximum: 600_000, default: 10_000 }),
    ONTO_TRACES_FILE: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'A file the spans are appended to, a JSON line each (./onto up --tracing; scripts/traces.mjs reads it), instead of the exporters of the OTEL_* variables (docs/operations-tracing.md)',
      }),
    ),
    DB_POOL_MAX: Type.Integer({ minimum: 1, maximum: 1000, default: 20 }),
    OUTBOX_BATCH_SIZE: Type.Integer({ minimum: 1, maximum: 1000, default: 500 }),
    OUTBOX_RETENTION_HOURS: Type.Integer({
      minimum: 1,
      maximum: 8760,
      default: 24,
      description: 'How long sent outbox rows are kept before they are pruned',
    }),
    INBOX_RETENTION_HOURS: Type.Integer({
      minimum: 1,
      maximum: 8760,
      default: 168,
      description:
        "How long the inbox remembers a handled event (the window in which a redelivery is recognised); at least the consumed topics' retention",
    }),
  });
}

/**
 * What a service that replicates control's identity and schema adds (data, intelligence): how far
 * the revocation replica may lag, and how long a read or write waits for a version named by its
 * X-Consistency-Token.
 */
/** Read replicas of the service's database (issue 33, docs/adr/0080): data and intelligence. */
export function readReplicaConfigSchema() {
  return Type.Object({
    DATABASE_REPLICA_URLS: Type.Optional(
      Type.String({
        pattern: '^postgres(ql)?://[^,]+(,postgres(ql)?://[^,]+)*$',
        description:
          'Comma-separated URLs of streaming replicas of DATABASE_URL: reads without a WAL position in their consistency token go there, reads with one once a replica has replayed it (else the primary). A URL that is not a replica of this primary stops the service at start-up (docs/adr/0080)',
      }),
    ),
    REPLICA_MAX_LAG_MS: Type.Integer({
      minimum: 0,
      maximum: 3_600_000,
      default: 2000,
      description:
        'a replica further behind its primary than this, or not answering, is not read from until it catches up',
    }),
    REPLICA_WAIT_MS: Type.Integer({
      minimum: 0,
      maximum: 10_000,
      default: 250,
      description:
        'how long a read waits for a replica to replay the WAL position its consistency token names before the primary serves it',
    }),
  });
}

export function replicaConfigSchema() {
  return Type.Object({
    ONTO_IDENTITY_PUBLIC_KEY: Type.String({
      minLength: 1,
      description:
        "Required. The public half of control's identity key (Ed25519, PEM or base64 of PEM/DER): signing keys and heartbeats on onto.identity that it does not verify are refused (ADR 35)",
    }),
    ONTO_IDENTITY_PUBLIC_KEY_NEXT: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          "While control's identity key is rotated: the public half of the new one, whose signatures are accepted too. Set it on data and intelligence first, then give control the new private key, then make it ONTO_IDENTITY_PUBLIC_KEY and unset this (ADR 35)",
      }),
    ),
    IDENTITY_MAX_CLOCK_AHEAD_MS: Type.Integer({
      minimum: 0,
      maximum: 3_600_000,
      default: 60_000,
      description: "A heartbeat whose watermark is further than this ahead of this service's clock is refused (ADR 35)",
    }),
    IDENTITY_MAX_LAG_MS: Type.Integer({
      minimum: 100,
      maximum: 3_600_000,
      default: 300_000,
      description:
        'Requests are refused (503) while the replica of revocations lags control by more than this: how long a revoked token may still work while Kafka is away (ADR 22). 2000 is the strict mode',
    }),
    CONSISTENCY_WAIT_MS: Type.Integer({
      minimum: 0,
      maximum: 60_000,
      default: 2000,
      description:
        'How long a request whose X-Consistency-Token names a version not applied here (schema, or data in intelligence) waits before 503',
    }),
    POSITION_ANNOUNCE_MS: Type.Integer({
      minimum: 100,
      maximum: 600_000,
      default: 1000,
      description:
        "How often the service announces its position per world (what it has applied) for control's version vector, when it changed",
    }),
  });
}
