import { execFileSync } from 'node:child_process';

/** Endpoints of the PostgreSQL server, Redis and Kafka that integration tests use. */
export interface TestEndpoints {
  /** A URL of the server's maintenance database; test databases are created beside it. */
  postgresUrl: string;
  redisUrl: string;
  kafkaBrokers: string;
}

export const ENV = {
  postgres: 'ONTO_TEST_PG_URL',
  redis: 'ONTO_TEST_REDIS_URL',
  kafka: 'ONTO_TEST_KAFKA_BROKERS',
} as const;

export function endpointsFromEnv(env: NodeJS.ProcessEnv = process.env): TestEndpoints | undefined {
  const postgresUrl = env[ENV.postgres];
  const redisUrl = env[ENV.redis];
  const kafkaBrokers = env[ENV.kafka];
  if (postgresUrl && redisUrl && kafkaBrokers) return { postgresUrl, redisUrl, kafkaBrokers };
  return undefined;
}

export function testEndpoints(): TestEndpoints {
  const endpoints = endpointsFromEnv();
  if (!endpoints) {
    throw new Error(
      `integration tests need ${Object.values(ENV).join(', ')} (run them through ./onto test), or a Docker engine for testcontainers`,
    );
  }
  return endpoints;
}

export function dockerAvailable(): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 5000 });
    return true;
  } catch {
    return false;
  }
}
