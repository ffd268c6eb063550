import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { bootstrapTokenFault } from '@onto/control/config';
import { loadConfig } from '@onto/shared';
import { testIdentityEnv } from '@onto/shared/testing';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { SERVICES } from './services.js';

// There is no Docker engine on the CI machine, so the compose file is checked by reading it
// against the services' own config schemas.
const file = fileURLToPath(new URL('../docker-compose.yml', import.meta.url));

interface ComposeService {
  image?: string;
  entrypoint?: string[];
  build?: unknown;
  command?: string[];
  environment?: Record<string, string | number>;
  ports?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
}

const compose = parse(readFileSync(file, 'utf8'), { merge: true }) as { services: Record<string, ComposeService> };

const KAFKA_USERS = ['admin', 'controller', 'control', 'data', 'intelligence'];

// What a deployment sets: the secrets compose demands (`${NAME:?message}`).
const SECRETS: Record<string, string> = {
  ONTO_BOOTSTRAP_TOKEN: randomBytes(32).toString('hex'),
  ONTO_POSTGRES_PASSWORD: randomBytes(32).toString('hex'),
  ...testIdentityEnv(),
  ...Object.fromEntries(
    KAFKA_USERS.map((u) => [`ONTO_KAFKA_${u.toUpperCase()}_PASSWORD`, randomBytes(24).toString('hex')]),
  ),
};

/**
 * Compose's interpolation: `${NAME:-default}`, `${NAME:?message}` (an error naming the message
 * when NAME is unset or empty) and `${NAME}`, from `env`.
 */
const interpolate = (value: string | number, env: Record<string, string> = SECRETS) =>
  String(value).replace(/\$\{([A-Z_]+)(?::([-?])([^}]*))?\}/g, (_, name: string, op?: string, arg?: string) => {
    const set = env[name];
    if (set !== undefined && set !== '') return set;
    if (op === '?') throw new Error(`required variable ${name} is missing a value: ${arg}`);
    return op === '-' ? (arg ?? '') : '';
  });

/** Every value in the file that compose interpolates. */
const values = (node: unknown): string[] =>
  typeof node === 'string'
    ? [node]
    : Array.isArray(node)
      ? node.flatMap(values)
      : node && typeof node === 'object'
        ? Object.values(node).flatMap(values)
        : [];

describe('docker-compose.yml', () => {
  it('runs PostgreSQL 15, Redis 7 and Kafka 4.1, each with a health check', () => {
    expect(compose.services.postgres?.image).toBe('postgres:15');
    expect(compose.services.redis?.image).toBe('redis:7');
    expect(compose.services.kafka?.image).toMatch(/^apache\/kafka:4\.1\./);
    expect(compose.services.kafka?.entrypoint).toEqual(['/etc/onto-kafka/compose-start.sh']);
    expect(readFileSync(new URL('../infra/kafka/server.properties', import.meta.url), 'utf8')).toMatch(
      /^process\.roles=broker,controller$/m,
    );
    for (const infra of ['postgres', 'redis', 'kafka']) {
      expect(compose.services[infra]?.healthcheck?.test.length, infra).toBeGreaterThan(0);
    }
  });

  it('has no default secret: it refuses to start without a bootstrap token and a database password', () => {
    const control = compose.services.control?.environment ?? {};
    const postgres = compose.services.postgres?.environment ?? {};
    for (const value of [control.ONTO_BOOTSTRAP_TOKEN, postgres.POSTGRES_PASSWORD]) {
      expect(() => interpolate(value ?? '', {})).toThrow(/openssl rand -hex 32/);
    }
    expect(() => interpolate(control.ONTO_BOOTSTRAP_TOKEN ?? '', { ONTO_BOOTSTRAP_TOKEN: '' })).toThrow();
    // Nothing else falls back to a value written in the file.
    expect(values(compose).filter((v) => /\$\{[A-Z_]+:-/.test(v))).toEqual([]);
    expect(JSON.stringify(compose)).not.toMatch(/postgres:postgres@|change-me/);
  });

  it("has no default Kafka password, and the broker's start script refuses to run without them", () => {
    const kafka = compose.services.kafka?.environment ?? {};
    const topics = compose.services.topics?.environment ?? {};
    const passwords = [
      ...KAFKA_USERS.map((u) => kafka[`KAFKA_${u.toUpperCase()}_PASSWORD`]),
      topics.KAFKA_SASL_PASSWORD,
      ...SERVICES.map((s) => compose.services[s.name]?.environment?.KAFKA_SASL_PASSWORD),
    ];
    for (const value of passwords) expect(() => interpolate(value ?? '', {})).toThrow(/openssl rand -hex 24/);
    const start = fileURLToPath(new URL('../infra/kafka/compose-start.sh', import.meta.url));
    const env = Object.fromEntries(KAFKA_USERS.map((u) => [`KAFKA_${u.toUpperCase()}_PASSWORD`, 'a1'.repeat(16)]));
    const run = spawnSync('bash', [start], { env: { PATH: process.env.PATH, ...env, KAFKA_DATA_PASSWORD: '' } });
    expect(run.status).toBe(1);
    expect(run.stderr.toString()).toMatch(/password of data must be .*openssl rand -hex 24/);
  });

  it('gives each service its own Kafka user, and the topics job the admin with the ACLs', () => {
    for (const s of SERVICES) {
      const env = compose.services[s.name]?.environment ?? {};
      expect(env.KAFKA_SASL_MECHANISM).toBe('scram-sha-512');
      expect(env.KAFKA_SASL_USERNAME).toBe(s.name);
      expect(env.KAFKA_SASL_PASSWORD).toBe(
        `\${ONTO_KAFKA_${s.name.toUpperCase()}_PASSWORD:?set ONTO_KAFKA_${s.name.toUpperCase()}_PASSWORD, e.g. to the output of openssl rand -hex 24}`,
      );
    }
    expect(compose.services.topics?.environment).toMatchObject({ KAFKA_SASL_USERNAME: 'admin', ONTO_KAFKA_ACLS: 'on' });
  });

  it('publishes PostgreSQL, Redis and Kafka only with the override file, on the loopback interface', () => {
    for (const infra of ['postgres', 'redis', 'kafka']) expect(compose.services[infra]?.ports, infra).toBeUndefined();
    const override = parse(readFileSync(new URL('../docker-compose.infra-ports.yml', import.meta.url), 'utf8')) as {
      services: Record<string, ComposeService>;
    };
    expect(Object.keys(override.services).sort()).toEqual(['kafka', 'postgres', 'redis']);
    for (const entry of Object.values(override.services)) {
      for (const port of entry.ports ?? []) expect(port).toMatch(/^127\.0\.0\.1:/);
    }
  });

  it('control refuses a bootstrap token that is short, a pattern, not random, or a published default', () => {
    for (const token of [
      'short-token',
      'change-me-to-a-long-random-token',
      'abababababababababababababababababab',
      '0123456789'.repeat(4),
      'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaabbbbbbbbbb',
    ]) {
      expect(bootstrapTokenFault(token), token).toMatch(/; make one with: openssl rand -hex 32$/);
    }
    for (let i = 0; i < 200; i++) expect(bootstrapTokenFault(randomBytes(32).toString('hex'))).toBeUndefined();
    expect(bootstrapTokenFault(SECRETS.ONTO_BOOTSTRAP_TOKEN ?? '')).toBeUndefined();
  });

  it('creates one database per service', () => {
    const init = readFileSync(fileURLToPath(new URL('../infra/postgres/init.sql', import.meta.url)), 'utf8');
    for (const s of SERVICES) expect(init).toContain(`CREATE DATABASE onto_${s.name};`);
  });

  describe.each(SERVICES)('$name', (service) => {
    const entry = compose.services[service.name];

    it('sets every variable its config schema requires, each valid', () => {
      expect(entry, `${service.name} is missing from docker-compose.yml`).toBeDefined();
      const env = Object.fromEntries(Object.entries(entry?.environment ?? {}).map(([k, v]) => [k, interpolate(v)]));
      const config = loadConfig(service.schema, env) as { DATABASE_URL: string; PORT: number };
      expect(config.DATABASE_URL).toMatch(new RegExp(`/onto_${service.name}$`));
      const properties = service.schema.properties as Record<string, { default?: unknown }>;
      const required = (service.schema.required ?? []).filter((k) => properties[k]?.default === undefined);
      expect(required.length).toBeGreaterThan(0);
      for (const name of required) expect(env, name).toHaveProperty(name);
      const unknown = Object.keys(env).filter((k) => !(k in service.schema.properties));
      expect(unknown, 'variables the service does not read').toEqual([]);
    });

    it('publishes, probes and listens on the same port', () => {
      const port = Number(entry?.environment?.PORT);
      expect(port).toBe(service.port);
      expect(entry?.ports).toEqual([`${port}:${port}`]);
      expect(entry?.healthcheck?.test.join(' ')).toContain(`http://127.0.0.1:${port}/ready`);
      expect(entry?.command).toEqual(['node', `services/${service.name}/dist/server.js`]);
    });

    it('starts only once PostgreSQL, Redis and Kafka are healthy and the topics exist', () => {
      expect(entry?.depends_on).toEqual({
        postgres: { condition: 'service_healthy' },
        redis: { condition: 'service_healthy' },
        kafka: { condition: 'service_healthy' },
        topics: { condition: 'service_completed_successfully' },
      });
      const host = (url: string | number | undefined) => new URL(String(url)).hostname;
      expect(host(entry?.environment?.DATABASE_URL)).toBe('postgres');
      expect(host(entry?.environment?.REDIS_URL)).toBe('redis');
      expect(entry?.environment?.KAFKA_BROKERS).toBe('kafka:9092');
    });
  });
});

// docker-compose.cluster.yml, over docker-compose.yml: three brokers (issue 33, docs/adr/0053).
describe('docker-compose.cluster.yml', () => {
  const cluster = parse(readFileSync(new URL('../docker-compose.cluster.yml', import.meta.url), 'utf8'), {
    merge: true,
  }) as { services: Record<string, ComposeService> };
  /** Compose's merge of an override: environment and depends_on merged by key, the rest replaced. */
  const merged = (name: string): ComposeService => {
    const base = compose.services[name] ?? {};
    const over = cluster.services[name] ?? {};
    return {
      ...base,
      ...over,
      environment: { ...base.environment, ...over.environment },
      depends_on: { ...base.depends_on, ...over.depends_on },
    };
  };
  const nodes = ['kafka', 'kafka-2', 'kafka-3'];
  const properties = (file: string) =>
    Object.fromEntries(
      readFileSync(new URL(`../infra/kafka/${file}`, import.meta.url), 'utf8')
        .split('\n')
        .filter((l) => /^[a-z]/.test(l))
        .map((l) => l.split(/=(.*)/s).slice(0, 2) as [string, string]),
    );

  it('runs three KRaft nodes of one cluster, each broker and controller, with the cluster settings', () => {
    const envs = nodes.map((n) => merged(n).environment ?? {});
    expect(envs.map((e) => Number(e.ONTO_KAFKA_NODE_ID))).toEqual([1, 2, 3]);
    expect(envs.map((e) => e.ONTO_KAFKA_ADVERTISED_HOST)).toEqual(nodes);
    for (const env of envs) {
      expect(env.ONTO_KAFKA_QUORUM_VOTERS).toBe('1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093');
      expect(env.ONTO_KAFKA_CLUSTER_ID).toBe(envs[0]?.ONTO_KAFKA_CLUSTER_ID);
      expect(Buffer.from(String(env.ONTO_KAFKA_CLUSTER_ID), 'base64url')).toHaveLength(16);
      for (const u of KAFKA_USERS) {
        expect(() => interpolate(env[`KAFKA_${u.toUpperCase()}_PASSWORD`] ?? '', {})).toThrow(/openssl rand -hex 24/);
      }
    }
    for (const n of nodes) {
      const node = merged(n);
      expect(node.image).toMatch(/^apache\/kafka:4\.1\./);
      expect(node.entrypoint).toEqual(['/etc/onto-kafka/compose-start.sh']);
      expect(JSON.stringify((node as { volumes?: unknown }).volumes)).toContain('cluster.properties');
      expect(node.healthcheck?.test.join(' ')).toContain('kafka-broker-api-versions.sh');
    }
    expect(properties('cluster.properties')).toMatchObject({
      'default.replication.factor': '3',
      'min.insync.replicas': '2',
      'offsets.topic.replication.factor': '3',
      'transaction.state.log.replication.factor': '3',
      'transaction.state.log.min.isr': '2',
      'unclean.leader.election.enable': 'false',
    });
  });

  it('gives the services and the topics job the three brokers, and starts them once all are healthy', () => {
    expect(merged('topics').environment?.KAFKA_BROKERS).toBe('kafka:9092,kafka-2:9092,kafka-3:9092');
    for (const n of nodes) expect(merged('topics').depends_on?.[n]).toEqual({ condition: 'service_healthy' });
    for (const s of SERVICES) {
      const entry = merged(s.name);
      const env = Object.fromEntries(Object.entries(entry.environment ?? {}).map(([k, v]) => [k, interpolate(v)]));
      const config = loadConfig(s.schema, env) as { KAFKA_BROKERS: string };
      expect(config.KAFKA_BROKERS).toBe('kafka:9092,kafka-2:9092,kafka-3:9092');
      for (const n of nodes) expect(entry.depends_on?.[n]).toEqual({ condition: 'service_healthy' });
      expect(entry.depends_on?.topics).toEqual({ condition: 'service_completed_successfully' });
    }
  });

  it("the broker's start script refuses a cluster node without its quorum and cluster id", () => {
    const start = fileURLToPath(new URL('../infra/kafka/compose-start.sh', import.meta.url));
    const env = Object.fromEntries(KAFKA_USERS.map((u) => [`KAFKA_${u.toUpperCase()}_PASSWORD`, 'a1'.repeat(16)]));
    const run = spawnSync('bash', [start], { env: { PATH: process.env.PATH, ...env, ONTO_KAFKA_NODE_ID: '2' } });
    expect(run.status).toBe(1);
    expect(run.stderr.toString()).toMatch(/ONTO_KAFKA_QUORUM_VOTERS and ONTO_KAFKA_CLUSTER_ID/);
  });
  it('adds a streaming replica of postgres that data and intelligence read from (docs/adr/0080)', () => {
    const replica = cluster.services['postgres-replica'] as ComposeService & { user?: string; volumes?: string[] };
    expect(replica.image).toBe(compose.services.postgres?.image);
    expect(replica.depends_on?.postgres?.condition).toBe('service_healthy');
    const script = replica.volumes?.find((v) => v.includes('replica-start.sh'))?.split(':')[0] as string;
    const start = readFileSync(new URL(`../${script.replace(/^\.\//, '')}`, import.meta.url), 'utf8');
    expect(start).toMatch(/pg_basebackup -h postgres -U postgres -D "\$DATA" -X stream -R/);
    expect(start).toMatch(/exec postgres -D "\$DATA" -c hot_standby=on/);
    expect(statSync(new URL(`../${script.replace(/^\.\//, '')}`, import.meta.url)).mode & 0o111).not.toBe(0);
    // The primary lets it in: a replication line added at initdb.
    const primary = cluster.services.postgres as { volumes?: string[] };
    const hba = primary.volumes?.find((v) => v.includes('/docker-entrypoint-initdb.d/'))?.split(':')[0] as string;
    expect(readFileSync(new URL(`../${hba.replace(/^\.\//, '')}`, import.meta.url), 'utf8')).toContain(
      'host replication postgres all scram-sha-256',
    );
    for (const name of ['data', 'intelligence']) {
      const service = merged(name);
      // Its own database on the replica, as DATABASE_URL names it on the primary.
      const own = /@postgres:5432(\/onto_\w+)$/.exec(String(service.environment?.DATABASE_URL))?.[1];
      expect(own, name).toBe(`/onto_${name}`);
      expect(String(service.environment?.DATABASE_REPLICA_URLS), name).toMatch(
        new RegExp(`@postgres-replica:5432${own}$`),
      );
      expect(service.depends_on?.['postgres-replica']?.condition, name).toBe('service_healthy');
      expect(service.depends_on?.['kafka-3']?.condition, name).toBe('service_healthy');
    }
  });
});
