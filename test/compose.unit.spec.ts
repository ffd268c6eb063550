import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { SERVICES } from './services.js';

// There is no Docker engine on the CI machine, so the compose file is checked by reading it
// against the services' own config schemas.
const file = fileURLToPath(new URL('../docker-compose.yml', import.meta.url));

interface ComposeService {
  image?: string;
  build?: unknown;
  command?: string[];
  environment?: Record<string, string | number>;
  ports?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
}

const compose = parse(readFileSync(file, 'utf8'), { merge: true }) as { services: Record<string, ComposeService> };

/** Compose's `${NAME:-default}` interpolation with an empty environment. */
const interpolate = (value: string | number) =>
  String(value).replace(/\$\{[A-Z_]+:-([^}]*)\}/g, (_, fallback: string) => fallback);

describe('docker-compose.yml', () => {
  it('runs PostgreSQL 15, Redis 7 and Kafka 4.1, each with a health check', () => {
    expect(compose.services.postgres?.image).toBe('postgres:15');
    expect(compose.services.redis?.image).toBe('redis:7');
    expect(compose.services.kafka?.image).toMatch(/^apache\/kafka:4\.1\./);
    expect(compose.services.kafka?.environment?.KAFKA_PROCESS_ROLES).toBe('broker,controller');
    for (const infra of ['postgres', 'redis', 'kafka']) {
      expect(compose.services[infra]?.healthcheck?.test.length, infra).toBeGreaterThan(0);
    }
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
