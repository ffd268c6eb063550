import { dockerAvailable, ENV, endpointsFromEnv } from './env.js';

/**
 * Vitest global setup. The endpoints come from the environment (./onto test and .ci/run set
 * them). Without them, and with a Docker engine answering, PostgreSQL 15, Redis 7 and Kafka 4.1
 * are started with testcontainers for the duration of the run.
 */
export default async function setup(): Promise<(() => Promise<void>) | undefined> {
  // Without endpoints or Docker, unit tests still run; integration tests fail naming the variables.
  if (endpointsFromEnv() || !dockerAvailable()) return undefined;
  const [{ PostgreSqlContainer }, { RedisContainer }, { KafkaContainer }] = await Promise.all([
    import('@testcontainers/postgresql'),
    import('@testcontainers/redis'),
    import('@testcontainers/kafka'),
  ]);
  const [postgres, redis, kafka] = await Promise.all([
    new PostgreSqlContainer('postgres:15').withUsername('postgres').withPassword('postgres').start(),
    new RedisContainer('redis:7').start(),
    new KafkaContainer('confluentinc/cp-kafka:8.1.0').withKraft().start(),
  ]);
  // Workers are forked after global setup and inherit this environment.
  process.env[ENV.postgres] = postgres.getConnectionUri().replace(/\/[^/]*$/, '/postgres');
  process.env[ENV.redis] = redis.getConnectionUrl();
  process.env[ENV.kafka] = `${kafka.getHost()}:${kafka.getMappedPort(9093)}`;
  return async () => {
    await Promise.all([postgres.stop(), redis.stop(), kafka.stop()]);
  };
}
