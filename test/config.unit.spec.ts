import { ConfigError, kafkaSaslOf, loadConfig } from '@onto/shared';
import { testIdentityEnv } from '@onto/shared/testing';
import { describe, expect, it } from 'vitest';
import { SERVICES } from './services.js';

const valid = {
  DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/onto_x',
  REDIS_URL: 'redis://127.0.0.1:6379',
  KAFKA_BROKERS: '127.0.0.1:9092,127.0.0.2:9092',
  ...testIdentityEnv(),
};

/** The keys each service cannot start without (ADR 35, ADR 42): no unsigned or unsealed mode. */
const REQUIRED_KEYS: Record<string, string[]> = {
  control: ['ONTO_IDENTITY_PRIVATE_KEY', 'ONTO_KEY_ENCRYPTION_KEY'],
  data: ['ONTO_IDENTITY_PUBLIC_KEY'],
  intelligence: ['ONTO_IDENTITY_PUBLIC_KEY'],
};

describe.each(SERVICES)('$name configuration', (service) => {
  it('converts and defaults', () => {
    const config = loadConfig(service.schema, { ...valid, PORT: '8080', LOG_LEVEL: 'debug' }) as Record<
      string,
      unknown
    >;
    expect(config).toMatchObject({
      PORT: 8080,
      LOG_LEVEL: 'debug',
      HOST: '0.0.0.0',
      SHUTDOWN_TIMEOUT_MS: 10_000,
      OUTBOX_BATCH_SIZE: 500,
      OUTBOX_RETENTION_HOURS: 24,
      INBOX_RETENTION_HOURS: 168,
    });
    expect(loadConfig(service.schema, { ...valid, INBOX_RETENTION_HOURS: '720' })).toMatchObject({
      INBOX_RETENTION_HOURS: 720,
    });
    expect((loadConfig(service.schema, valid) as { PORT: number }).PORT).toBe(service.port);
  });

  it.each([
    ['DATABASE_URL', { DATABASE_URL: undefined }],
    ['DATABASE_URL', { DATABASE_URL: 'mysql://x' }],
    ['REDIS_URL', { REDIS_URL: '' }],
    ['KAFKA_BROKERS', { KAFKA_BROKERS: 'localhost' }],
    ['PORT', { PORT: '70000' }],
    ['PORT', { PORT: '80.5' }],
    ['LOG_LEVEL', { LOG_LEVEL: 'loud' }],
    ['SHUTDOWN_TIMEOUT_MS', { SHUTDOWN_TIMEOUT_MS: 'soon' }],
    ['OUTBOX_BATCH_SIZE', { OUTBOX_BATCH_SIZE: '1001' }],
    ['OUTBOX_RETENTION_HOURS', { OUTBOX_RETENTION_HOURS: '1.5' }],
    ['INBOX_RETENTION_HOURS', { INBOX_RETENTION_HOURS: '0' }],
  ])('refuses a bad %s, naming it', (name, override) => {
    const attempt = () => loadConfig(service.schema, { ...valid, ...override });
    expect(attempt).toThrow(ConfigError);
    expect(attempt).toThrow(new RegExp(`${name}: `));
    try {
      attempt();
    } catch (error) {
      expect((error as ConfigError).problems.map((p) => p.variable)).toEqual([name]);
    }
  });

  it('names every bad variable at once', () => {
    expect(() => loadConfig(service.schema, { PORT: 'x' })).toThrow(/DATABASE_URL.*REDIS_URL.*KAFKA_BROKERS|PORT/);
    try {
      loadConfig(service.schema, { PORT: 'x' });
    } catch (error) {
      expect(new Set((error as ConfigError).problems.map((p) => p.variable))).toEqual(
        new Set(['DATABASE_URL', 'REDIS_URL', 'KAFKA_BROKERS', 'PORT', ...(REQUIRED_KEYS[service.name] ?? [])]),
      );
    }
  });

  it("reads the service's Kafka user, all three SASL variables or none", () => {
    const sasl = {
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME: service.name,
      KAFKA_SASL_PASSWORD: 'p'.repeat(32),
    };
    expect(kafkaSaslOf(loadConfig(service.schema, { ...valid, ...sasl }))).toEqual({
      mechanism: 'scram-sha-512',
      username: service.name,
      password: 'p'.repeat(32),
    });
    expect(kafkaSaslOf(loadConfig(service.schema, valid))).toBeUndefined();
    expect(() => loadConfig(service.schema, { ...valid, ...sasl, KAFKA_SASL_MECHANISM: 'gssapi' })).toThrow(
      /KAFKA_SASL_MECHANISM/,
    );
    const partial = loadConfig(service.schema, { ...valid, KAFKA_SASL_USERNAME: service.name });
    expect(() => kafkaSaslOf(partial)).toThrow(/KAFKA_SASL_MECHANISM: required.*KAFKA_SASL_PASSWORD: required/);
  });
});
