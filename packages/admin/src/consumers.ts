import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { dlqOf, physicalTopic, TOPIC_NAMES } from '@onto/shared';
import { AdminError, EXIT } from './errors.js';

const run = promisify(execFile);

/** The users onto's own processes log in as: never a downstream consumer's name. */
const RESERVED = new Set(['admin', 'controller', 'control', 'data', 'intelligence']);
const NAME = /^[a-z][a-z0-9._-]{0,62}$/;
export const MECHANISM = 'SCRAM-SHA-512';

export interface ConsumerUser {
  name: string;
  topics: string[];
  groupPrefixes: string[];
}

/** Kafka's jars, as ./onto fetched them (ONTO_KAFKA_LIBS, else the newest complete one under the cache). */
function kafkaLibs(env: NodeJS.ProcessEnv): string {
  if (env.ONTO_KAFKA_LIBS) return env.ONTO_KAFKA_LIBS;
  const cache = env.ONTO_CACHE_DIR ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'onto');
  const found = (existsSync(cache) ? readdirSync(cache) : [])
    .filter((d) => d.startsWith('kafka-') && existsSync(join(cache, d, 'libs', '.onto-complete')))
    .sort()
    .at(-1);
  if (!found)
    throw new AdminError(`no Kafka jars under ${cache}: run ./onto up once, or set ONTO_KAFKA_LIBS`, EXIT.failure);
  return join(cache, found, 'libs');
}

/**
 * Downstream consumers' Kafka users (docs/consumers.md): a SCRAM-SHA-512 credential made with Kafka's
 * own ConfigCommand and read ACLs with its AclCommand (kafkajs can do neither), logged in as the
 * admin whose client settings `--kafka-config` names (./onto writes .onto/run/kafka-admin.properties).
 */
export class ConsumerUsers {
  constructor(
    private readonly brokers: string,
    private readonly adminConfig: string | undefined,
    private readonly prefix: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  private async java(tool: string, args: string[]): Promise<string> {
    const libs = kafkaLibs(this.env);
    const config = this.adminConfig ? ['--command-config', this.adminConfig] : [];
    try {
      const { stdout } = await run(
        'java',
        [
          '-Xmx128m',
          '-XX:TieredStopAtLevel=1',
          '-cp',
          `${libs}/*`,
          tool,
          '--bootstrap-server',
          this.brokers,
          ...config,
          ...args,
        ],
        { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 },
      );
      return stdout;
    } catch (error) {
      const e = error as { stderr?: string; message: string };
      throw new AdminError(
        `Kafka's ${tool.split('.').at(-1)} failed: ${(e.stderr || e.message).trim().slice(0, 2000)}`,
        EXIT.failure,
      );
    }
  }

  static checkName(name: string): void {
    if (!NAME.test(name)) throw new AdminError(`a consumer's name must match ${NAME}`, EXIT.usage);
    if (RESERVED.has(name)) throw new AdminError(`${name} is one of onto's own Kafka users`, EXIT.usage);
  }

  /** Logical topic names → physical, refusing what is not a platform topic or its dead-letter twin. */
  physicalTopics(topics: string[]): string[] {
    const known = new Set(TOPIC_NAMES.flatMap((t) => [t, dlqOf(t)]));
    for (const t of topics) {
      if (!known.has(t))
        throw new AdminError(`${t} is not one of onto's topics (${TOPIC_NAMES.join(', ')}, or their .dlq)`, EXIT.usage);
    }
    return topics.map((t) => physicalTopic(this.prefix, t));
  }

  private async setPassword(name: string): Promise<string> {
    const password = randomBytes(24).toString('hex');
    await this.java('kafka.admin.ConfigCommand', [
      '--alter',
      '--add-config',
      `${MECHANISM}=[iterations=8192,password=${password}]`,
      '--entity-type',
      'users',
      '--entity-name',
      name,
    ]);
    return password;
  }

  async add(name: string, topics: string[], groupPrefix: string): Promise<{ password: string }> {
    ConsumerUsers.checkName(name);
    const physical = this.physicalTopics(topics);
    if (!/^[A-Za-z0-9._-]{1,200}$/.test(groupPrefix))
      throw new AdminError('--group-prefix must be 1-200 of A-Z a-z 0-9 . _ -', EXIT.usage);
    if ((await this.list()).some((u) => u.name === name)) {
      throw new AdminError(`consumer ${name} exists: rotate its password or remove it first`, EXIT.usage);
    }
    const password = await this.setPassword(name);
    const principal = ['--allow-principal', `User:${name}`];
    await this.java('org.apache.kafka.tools.AclCommand', [
      '--add',
      ...principal,
      '--operation',
      'Read',
      ...physical.flatMap((t) => ['--topic', t]),
    ]);
    await this.java('org.apache.kafka.tools.AclCommand', [
      '--add',
      ...principal,
      '--operation',
      'Read',
      '--group',
      groupPrefix,
      '--resource-pattern-type',
      'prefixed',
    ]);
    return { password };
  }

  async rotate(name: string): Promise<{ password: string }> {
    ConsumerUsers.checkName(name);
    if (!(await this.list()).some((u) => u.name === name)) throw new AdminError(`no consumer ${name}`, EXIT.notFound);
    return { password: await this.setPassword(name) };
  }

  async remove(name: string): Promise<void> {
    ConsumerUsers.checkName(name);
    const user = (await this.list()).find((u) => u.name === name);
    if (!user) throw new AdminError(`no consumer ${name}`, EXIT.notFound);
    await this.java('kafka.admin.ConfigCommand', [
      '--alter',
      '--delete-config',
      MECHANISM,
      '--entity-type',
      'users',
      '--entity-name',
      name,
    ]);
    const principal = ['--allow-principal', `User:${name}`, '--operation', 'Read', '--force'];
    if (user.topics.length > 0) {
      await this.java('org.apache.kafka.tools.AclCommand', [
        '--remove',
        ...principal,
        ...user.topics.flatMap((t) => ['--topic', t]),
      ]);
    }
    for (const g of user.groupPrefixes) {
      await this.java('org.apache.kafka.tools.AclCommand', [
        '--remove',
        ...principal,
        '--group',
        g,
        '--resource-pattern-type',
        'prefixed',
      ]);
    }
  }

  /** Every SCRAM user that is not onto's own, with the topics and group prefixes it may read. */
  async list(): Promise<ConsumerUser[]> {
    const described = await this.java('kafka.admin.ConfigCommand', ['--describe', '--entity-type', 'users']);
    const names = [...described.matchAll(/user-principal '([^']+)'/g)]
      .map((m) => m[1] as string)
      .filter((n) => !RESERVED.has(n));
    const acls = await this.java('org.apache.kafka.tools.AclCommand', ['--list']);
    const users = new Map<string, ConsumerUser>(names.map((n) => [n, { name: n, topics: [], groupPrefixes: [] }]));
    // "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=x, patternType=LITERAL)`:" then one line per ACL.
    for (const block of acls.split(/\n(?=Current ACLs for resource)/)) {
      const resource = /resourceType=(\w+), name=([^,]+), patternType=(\w+)/.exec(block);
      if (!resource) continue;
      for (const m of block.matchAll(/principal=User:([^,]+), host=[^,]+, operation=READ, permissionType=ALLOW/g)) {
        const user = users.get(m[1] as string);
        if (!user) continue;
        if (resource[1] === 'TOPIC') user.topics.push(resource[2] as string);
        if (resource[1] === 'GROUP' && resource[3] === 'PREFIXED') user.groupPrefixes.push(resource[2] as string);
      }
    }
    return [...users.values()].sort((a, b) => a.name.localeCompare(b.name));
  }
}
