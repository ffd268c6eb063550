import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ConfigError,
  DLQ_HEADERS,
  dlqOf,
  kafkaSaslConfigSchema,
  kafkaSaslOf,
  loadConfig,
  physicalTopic,
} from '@onto/shared';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { type CodegenDerived, type CodegenSchema, generateWorldModule } from './codegen.js';
import { ConsumerUsers, MECHANISM } from './consumers.js';
import { AdminError, EXIT, EXIT_HELP } from './errors.js';
import { type KafkaRecord, KafkaTools, type PartitionLog } from './kafka.js';
import { type Io, print, processIo, progress } from './output.js';
import { type ServiceName, Services } from './services.js';

export { EXIT } from './errors.js';
export type { Io } from './output.js';

interface GlobalOptions {
  json: boolean;
  controlUrl: string;
  dataUrl: string;
  intelligenceUrl: string;
  token?: string;
  apiToken?: string;
  kafkaBrokers: string;
  kafkaConfig?: string;
  topicPrefix: string;
  timeout: number;
}

const REPLAY_HELP = `
Replayed records are the same records again (same key, value, headers, partition, plus
onto-replayed-from): every inbox consumer applies an event at most once, so a replayed event it
has already applied is skipped as a duplicate (onto_inbox_duplicates_total). That holds for as
long as the consumer remembers the event: INBOX_RETENTION_HOURS (default 168 h). An event older
than that is applied again; its effects are version-checked (a read model takes an object only
at a newer version, upsertIfNewer), so state never moves back, but side effects that are not
versioned (an alert raised again, a decision made again) can repeat.`;

const WORLD = /^[a-z][a-z0-9-]{0,62}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** control's answer to merge-verify: its own report, and data's and intelligence's once in. */
interface MergeVerification {
  complete: boolean;
  differences: number;
  services: Record<
    'control' | 'data' | 'intelligence',
    { checked: number; differences: number; sample: unknown[] } | null
  >;
}
const NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;

const offset = (value: string): bigint => {
  if (!/^\d{1,19}$/.test(value)) throw new InvalidArgumentError('an offset is a whole number ≥ 0');
  return BigInt(value);
};
const partitionArg = (value: string): number => {
  if (!/^\d{1,6}$/.test(value)) throw new InvalidArgumentError('a partition is a whole number ≥ 0');
  return Number(value);
};
const matching = (pattern: RegExp, what: string) => (value: string) => {
  if (!pattern.test(value)) throw new InvalidArgumentError(`${what} must match ${pattern.source}`);
  return value;
};
const seconds = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('a number of seconds > 0');
  return n;
};

const SERVICES: ServiceName[] = ['control', 'data', 'intelligence'];
const wholeNumbers = (value: string, previous: number[]): number[] => {
  if (!/^[1-9]\d{0,17}$/.test(value)) throw new InvalidArgumentError('a set-aside id is a whole number ≥ 1');
  return [...previous, Number(value)];
};

interface SetAsideEvent {
  id: number;
  eventId: string;
  topic: string;
  key: string;
  reason: string;
  bytes: number;
  setAsideAt: string;
}

/** Every waiting set-aside event of a service, page by page. */
async function listSetAside(api: Services, service: ServiceName): Promise<SetAsideEvent[]> {
  const events: SetAsideEvent[] = [];
  let after = 0;
  for (;;) {
    const page = (await api.call(service, 'GET', `/v1/admin/outbox/set-aside?limit=500&after=${after}`)) as {
      events: SetAsideEvent[];
      next: number | null;
    };
    events.push(...page.events);
    if (page.next === null) return events;
    after = page.next;
  }
}

/** The DLQ headers a redrive strips: the record goes back as it was before its consumer gave up. */
const DLQ_HEADER_NAMES = new Set<string>(Object.values(DLQ_HEADERS));

const text = (b: Buffer | null) => (b === null ? null : b.toString('utf8'));
const decodedValue = (b: Buffer | null): unknown => {
  const s = text(b);
  if (s === null) return null;
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
};
const deadLetterView = (r: KafkaRecord) => ({
  partition: r.partition,
  offset: r.offset.toString(),
  key: text(r.key),
  errorType: r.headers[DLQ_HEADERS.errorType] ?? null,
  error: r.headers[DLQ_HEADERS.error] ?? null,
  original: {
    topic: r.headers[DLQ_HEADERS.topic] ?? null,
    partition: r.headers[DLQ_HEADERS.partition] ?? null,
    offset: r.headers[DLQ_HEADERS.offset] ?? null,
  },
  consumer: r.headers[DLQ_HEADERS.consumer] ?? null,
  timestamp: new Date(Number(r.timestamp)).toISOString(),
  headers: r.headers,
});
const short = (s: string | null, n = 60) => (s && s.length > n ? `${s.slice(0, n - 1)}…` : s);

/** The Kafka user of KAFKA_SASL_* (all three or none), as the services read it; a bad set is a usage error. */
function kafkaLogin(env: NodeJS.ProcessEnv) {
  try {
    return kafkaSaslOf(loadConfig(kafkaSaslConfigSchema(), env));
  } catch (error) {
    if (error instanceof ConfigError) throw new AdminError(error.message, EXIT.usage);
    throw error;
  }
}

/** The CLI: returns the exit code rather than exiting, so that tests and scripts can call it. */
export async function main(argv: string[], io: Io = processIo, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let exitCode: number = EXIT.ok;
  const cleanups: (() => Promise<void>)[] = [];
  const program = new Command('onto-admin');

  const setup = (cmd: Command) => {
    const o = cmd.optsWithGlobals() as GlobalOptions;
    const kafka = () => {
      const tools = new KafkaTools(o.kafkaBrokers, kafkaLogin(env));
      cleanups.push(() => tools.close());
      return tools;
    };
    const services = () =>
      new Services({
        controlUrl: o.controlUrl,
        dataUrl: o.dataUrl,
        intelligenceUrl: o.intelligenceUrl,
        token: o.token,
        apiToken: o.apiToken,
      });
    return { o, kafka, services, bar: progress(io, o.json), topic: (t: string) => physicalTopic(o.topicPrefix, t) };
  };

  program
    .description("onto's repair tools for operators: through the services' admin endpoints and Kafka")
    .addOption(new Option('--json', 'JSON for scripts instead of tables').default(false))
    .addOption(new Option('--control-url <url>', 'control').default(env.ONTO_CONTROL_URL ?? 'http://127.0.0.1:4001'))
    .addOption(new Option('--data-url <url>', 'data').default(env.ONTO_DATA_URL ?? 'http://127.0.0.1:4002'))
    .addOption(
      new Option('--intelligence-url <url>', 'intelligence').default(
        env.ONTO_INTELLIGENCE_URL ?? 'http://127.0.0.1:4003',
      ),
    )
    .addOption(new Option('--token <access-token>', 'a platform administrator access token (ONTO_ACCESS_TOKEN)'))
    .addOption(new Option('--api-token <api-token>', 'an admin API token exchanged at control (ONTO_API_TOKEN)'))
    .addOption(
      new Option('--kafka-brokers <host:port,...>', 'Kafka (KAFKA_BROKERS)').default(
        env.KAFKA_BROKERS ?? '127.0.0.1:9092',
      ),
    )
    .addOption(
      new Option('--topic-prefix <prefix>', 'ONTO_TOPIC_PREFIX of the services').default(env.ONTO_TOPIC_PREFIX ?? ''),
    )
    .addOption(
      new Option(
        '--kafka-config <file>',
        "the Kafka admin's client settings for Kafka's tools (ONTO_KAFKA_ADMIN_CONFIG; ./onto up writes .onto/run/kafka-admin.properties)",
      ).default(env.ONTO_KAFKA_ADMIN_CONFIG),
    )
    .addOption(
      new Option('--timeout <seconds>', 'how long to wait for a repair to show its effect')
        .argParser(seconds)
        .default(60),
    )
    .addHelpText(
      'after',
      `\nEnvironment: ONTO_CONTROL_URL, ONTO_DATA_URL, ONTO_INTELLIGENCE_URL, ONTO_ACCESS_TOKEN,
  ONTO_API_TOKEN, KAFKA_BROKERS, ONTO_TOPIC_PREFIX; KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME
  and KAFKA_SASL_PASSWORD (all three or none) log in to an authenticated broker.\n\n${EXIT_HELP}`,
    )
    .showHelpAfterError()
    .exitOverride()
    .configureOutput({
      writeOut: (s) => io.stdout.write(s),
      writeErr: (s) => io.stderr.write(s),
    });
  // Options given by the environment when not on the command line (commander's env() reads process.env only).
  program.hook('preAction', (_root, action) => {
    const o = action.optsWithGlobals() as GlobalOptions;
    if (!o.token && env.ONTO_ACCESS_TOKEN) program.setOptionValue('token', env.ONTO_ACCESS_TOKEN);
    if (!o.apiToken && env.ONTO_API_TOKEN) program.setOptionValue('apiToken', env.ONTO_API_TOKEN);
  });
  const exitHelp = (cmd: Command) => cmd.addHelpText('after', `\n${EXIT_HELP}`);

  // ---------------------------------------------------------------- dlq
  const dlq = program.command('dlq').description('dead letters of <topic>.dlq: list, show one, redrive');
  exitHelp(
    dlq
      .command('list')
      .description('list the dead letters of <topic>.dlq with why and where they were read')
      .requiredOption('--topic <topic>', 'the original topic, e.g. onto.changes.objects')
      .action(async (_opts, cmd: Command) => {
        const { o, kafka, bar, topic } = setup(cmd);
        const records = await readDlq(kafka(), topic(cmd.opts().topic), bar);
        print(io, o.json, records.map(deadLetterView), {
          head: ['partition', 'offset', 'key', 'error type', 'error', 'original', 'consumer'],
          rows: records.map((r) => {
            const v = deadLetterView(r);
            return [
              v.partition,
              v.offset,
              short(v.key, 40),
              v.errorType,
              short(v.error),
              `${v.original.topic}/${v.original.partition}@${v.original.offset}`,
              v.consumer,
            ];
          }),
        });
        if (!o.json) io.stderr.write(`${records.length} dead letter(s) in ${dlqOf(topic(cmd.opts().topic))}\n`);
      }),
  );
  exitHelp(
    dlq
      .command('show')
      .description('one dead letter: every header and its value')
      .requiredOption('--topic <topic>', 'the original topic')
      .requiredOption('--offset <offset>', "the dead letter's offset in <topic>.dlq", offset)
      .option('--partition <n>', "the dead letter's partition in <topic>.dlq", partitionArg, 0)
      .action(async (opts: { topic: string; offset: bigint; partition: number }, cmd: Command) => {
        const { o, kafka, topic } = setup(cmd);
        const tools = kafka();
        const name = dlqOf(topic(opts.topic));
        const log = await dlqLog(tools, name);
        const p = log.find((l) => l.partition === opts.partition);
        if (!p || opts.offset < p.low || opts.offset >= p.high) {
          throw new AdminError(
            `${name} has no record at partition ${opts.partition} offset ${opts.offset}` +
              (p ? ` (it holds offsets ${p.low} to ${p.high - 1n})` : ''),
            EXIT.notFound,
          );
        }
        const [record] = await tools.read(name, [{ partition: p.partition, from: opts.offset, to: opts.offset + 1n }]);
        if (!record) throw new AdminError(`${name} has no record at offset ${opts.offset}`, EXIT.notFound);
        const view = { ...deadLetterView(record), value: decodedValue(record.value) };
        print(io, o.json, view, {
          head: ['field', 'value'],
          rows: [
            ['partition', view.partition],
            ['offset', view.offset],
            ['key', view.key],
            ['timestamp', view.timestamp],
            ...Object.entries(view.headers).map(([k, v]) => [`header ${k}`, v]),
            ['value', JSON.stringify(view.value, null, 2)],
          ],
        });
      }),
  );
  exitHelp(
    dlq
      .command('redrive')
      .description(
        'publish every dead letter of <topic>.dlq back to its original topic and partition (key, value and ' +
          'the original headers), then delete them from the DLQ (onto_dlq_depth drops). Fix the cause first ' +
          '(read onto-error with `dlq show`): a record that fails again is dead-lettered again.',
      )
      .requiredOption('--topic <topic>', 'the original topic')
      .action(async (opts: { topic: string }, cmd: Command) => {
        const { o, kafka, bar, topic, services } = setup(cmd);
        const tools = kafka();
        const name = dlqOf(topic(opts.topic));
        const log = await dlqLog(tools, name);
        const records = await readDlq(tools, topic(opts.topic), bar, log);
        if (records.length === 0) {
          throw new AdminError(`${name} is empty: nothing to redrive, nothing changed`, EXIT.nothingToDo);
        }
        const missing = records.find((r) => !r.headers[DLQ_HEADERS.topic] || !r.headers[DLQ_HEADERS.partition]);
        if (missing) {
          throw new AdminError(
            `${name} ${missing.partition}@${missing.offset} does not say where it was read (${DLQ_HEADERS.topic}): nothing redriven`,
            EXIT.failure,
          );
        }
        // The consumers recorded these events as dead-lettered: they forget that first, or the
        // redriven events would be skipped as duplicates.
        const byConsumer = new Map<string, string[]>();
        for (const r of records) {
          const consumer = r.headers[DLQ_HEADERS.consumer];
          const eventId =
            r.headers['onto-event-id'] ?? (decodedValue(r.value) as { event_id?: string } | null)?.event_id;
          if (consumer && typeof eventId === 'string')
            byConsumer.set(consumer, [...(byConsumer.get(consumer) ?? []), eventId]);
        }
        const api = services();
        for (const [consumer, eventIds] of byConsumer) {
          for (const service of ['control', 'data', 'intelligence'] as const) {
            await api.call(service, 'POST', '/v1/admin/inbox/release', { consumer, eventIds });
          }
        }
        await tools.publish(
          records.map((r) => ({
            topic: r.headers[DLQ_HEADERS.topic] as string,
            partition: Number(r.headers[DLQ_HEADERS.partition]),
            key: r.key,
            value: r.value,
            headers: Object.fromEntries(Object.entries(r.headers).filter(([k]) => !DLQ_HEADER_NAMES.has(k))),
          })),
        );
        // Only what was read and re-published: a dead letter that arrived meanwhile stays.
        const before = new Map<number, bigint>();
        for (const r of records) before.set(r.partition, r.offset + 1n);
        await tools.deleteBefore(
          name,
          [...before].map(([partition, offset]) => ({ partition, offset })),
        );
        const result = {
          topic: name,
          redriven: records.length,
          to: records.map((r) => ({
            from: `${r.partition}@${r.offset}`,
            topic: r.headers[DLQ_HEADERS.topic],
            partition: Number(r.headers[DLQ_HEADERS.partition]),
            originalOffset: r.headers[DLQ_HEADERS.offset],
          })),
        };
        print(io, o.json, result, {
          head: ['dead letter', 'redriven to', 'original offset'],
          rows: result.to.map((t) => [t.from, `${t.topic}/${t.partition}`, t.originalOffset]),
        });
      }),
  );

  // ---------------------------------------------------------------- outbox set-aside
  const setAside = program
    .command('outbox')
    .description("a service's outbox")
    .command('set-aside')
    .description('events the broker refused for good (too large, invalid, not authorised): list, redrive');
  const serviceOption = () =>
    new Option('--service <service>', 'the service whose outbox').choices(SERVICES).makeOptionMandatory();
  exitHelp(
    setAside
      .command('list')
      .description("list the service's set-aside events waiting for a redrive, with the broker's reason")
      .addOption(serviceOption())
      .action(async (opts: { service: ServiceName }, cmd: Command) => {
        const { o, services } = setup(cmd);
        const events = await listSetAside(services(), opts.service);
        print(io, o.json, events, {
          head: ['id', 'event', 'topic', 'key', 'bytes', 'set aside at', 'reason'],
          rows: events.map((e) => [e.id, e.eventId, e.topic, short(e.key, 40), e.bytes, e.setAsideAt, short(e.reason)]),
        });
        if (!o.json) io.stderr.write(`${events.length} set-aside event(s) in ${opts.service}'s outbox\n`);
      }),
  );
  exitHelp(
    setAside
      .command('redrive')
      .description(
        "put set-aside events back in the service's outbox (every waiting one, or those of --id), behind what " +
          "their lane holds now. Fix the cause first (raise the topic's max.message.bytes, grant the ACL): " +
          'an event the broker refuses again is set aside again.',
      )
      .addOption(serviceOption())
      .option('--id <n...>', 'a set-aside id (from `list`); repeatable', wholeNumbers, [])
      .action(async (opts: { service: ServiceName; id: number[] }, cmd: Command) => {
        const { o, services } = setup(cmd);
        const api = services();
        const result = (await api.call(
          opts.service,
          'POST',
          '/v1/admin/outbox/set-aside/redrive',
          opts.id.length > 0 ? { ids: opts.id } : {},
        )) as { redriven: number };
        if (result.redriven === 0) {
          throw new AdminError(
            `${opts.service} has ${opts.id.length > 0 ? `no waiting set-aside event of id ${opts.id.join(', ')}` : 'no set-aside event waiting'}: nothing to redrive, nothing changed`,
            EXIT.nothingToDo,
          );
        }
        const out = { service: opts.service, redriven: result.redriven };
        print(io, o.json, out, { head: ['service', 'redriven'], rows: [[out.service, out.redriven]] });
      }),
  );

  // ---------------------------------------------------------------- webhooks
  const webhooks = program
    .command('webhooks')
    .description('webhook deliveries dead-lettered after WEBHOOK_RETRY_HOURS (data): list, redrive');
  const webhookFilters = (cmd: Command) =>
    cmd.option('--world <world>', 'only this world').option('--webhook <name>', 'only this webhook (with --world)');
  const webhookQuery = (opts: { world?: string; webhook?: string }) =>
    new URLSearchParams({
      ...(opts.world ? { world: opts.world } : {}),
      ...(opts.webhook ? { webhook: opts.webhook } : {}),
    });
  exitHelp(
    webhookFilters(
      webhooks.command('dead').description('list dead-lettered deliveries, oldest first, with the last error'),
    ).action(async (opts: { world?: string; webhook?: string }, cmd: Command) => {
      const { o, services } = setup(cmd);
      const query = webhookQuery(opts);
      query.set('limit', '1000');
      const { dead } = (await services().call('data', 'GET', `/v1/admin/webhooks/dead?${query}`)) as {
        dead: {
          id: string;
          world: string;
          webhook: string;
          eventId: string;
          eventType: string;
          attempts: number;
          createdAt: string;
          lastError: string | null;
        }[];
      };
      print(io, o.json, dead, {
        head: ['id', 'world', 'webhook', 'event', 'type', 'attempts', 'queued at', 'last error'],
        rows: dead.map((d) => [
          d.id,
          d.world,
          d.webhook,
          d.eventId,
          d.eventType,
          d.attempts,
          d.createdAt,
          short(d.lastError),
        ]),
      });
      if (!o.json) io.stderr.write(`${dead.length} dead-lettered deliver${dead.length === 1 ? 'y' : 'ies'}\n`);
    }),
  );
  exitHelp(
    webhookFilters(
      webhooks
        .command('redrive')
        .description(
          'queue dead-lettered deliveries again (all, those of --world/--webhook, or --id), with a new retry window; ' +
            'fix the receiver first: one that refuses again dead-letters them again',
        ),
    )
      .option('--id <n...>', 'a delivery id (from `dead`); repeatable', wholeNumbers, [])
      .action(async (opts: { world?: string; webhook?: string; id: number[] }, cmd: Command) => {
        const { o, services } = setup(cmd);
        const result = (await services().call('data', 'POST', '/v1/admin/webhooks/redrive', {
          ...(opts.world ? { world: opts.world } : {}),
          ...(opts.webhook ? { webhook: opts.webhook } : {}),
          ...(opts.id.length > 0 ? { ids: opts.id.map(String) } : {}),
        })) as { redriven: number };
        if (result.redriven === 0)
          throw new AdminError(
            'no dead-lettered delivery matched: nothing to redrive, nothing changed',
            EXIT.nothingToDo,
          );
        print(io, o.json, result, { head: ['redriven'], rows: [[result.redriven]] });
      }),
  );

  // ---------------------------------------------------------------- consumers
  const consumers = program
    .command('consumers')
    .description("downstream consumers' Kafka users: a SCRAM login with read ACLs on some topics and a group prefix");
  const consumerUsers = (cmd: Command) => {
    const { o } = setup(cmd);
    return { o, users: new ConsumerUsers(o.kafkaBrokers, o.kafkaConfig, o.topicPrefix, env) };
  };
  const credentials = (o: GlobalOptions, name: string, password: string, extra: Record<string, unknown>) => {
    const out = { name, mechanism: MECHANISM, username: name, password, bootstrap: o.kafkaBrokers, ...extra };
    print(io, o.json, out, {
      head: ['name', 'mechanism', 'username', 'password'],
      rows: [[name, MECHANISM, name, password]],
    });
    if (!o.json)
      io.stderr.write(
        'The password is shown this once: keep it in a secret store (docs/consumers.md shows how to log in).\n',
      );
  };
  exitHelp(
    consumers
      .command('add <name>')
      .description(
        'make a Kafka user that may read these topics with groups starting with the prefix; prints its password once',
      )
      .requiredOption('--topics <topics>', 'comma-separated topics, e.g. domain.alerts,onto.changes.objects')
      .requiredOption('--group-prefix <prefix>', 'the consumer groups it may use start with this, e.g. billing-')
      .action(async (name: string, opts: { topics: string; groupPrefix: string }, cmd: Command) => {
        const { o, users } = consumerUsers(cmd);
        const topics = opts.topics
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean);
        const { password } = await users.add(name, topics, opts.groupPrefix);
        credentials(o, name, password, { topics: users.physicalTopics(topics), groupPrefix: opts.groupPrefix });
      }),
  );
  exitHelp(
    consumers
      .command('list')
      .description("the consumers' users with the topics and group prefixes they may read (never a password)")
      .action(async (_opts: unknown, cmd: Command) => {
        const { o, users } = consumerUsers(cmd);
        const list = await users.list();
        print(io, o.json, list, {
          head: ['name', 'topics', 'group prefixes'],
          rows: list.map((u) => [u.name, u.topics.join(', '), u.groupPrefixes.join(', ')]),
        });
      }),
  );
  exitHelp(
    consumers
      .command('rotate <name>')
      .description('a new password for the user (printed once); the old one stops working at once')
      .action(async (name: string, _opts: unknown, cmd: Command) => {
        const { o, users } = consumerUsers(cmd);
        const { password } = await users.rotate(name);
        credentials(o, name, password, {});
      }),
  );
  exitHelp(
    consumers
      .command('apply')
      .description(
        "make the broker's consumers those a deployment declares (docs/consumers.md): created or updated, each password from its passwordFile (generated into it when missing); idempotent",
      )
      .requiredOption(
        '--file <file>',
        'the declaration: {"consumers":[{"name","topics":[…],"groupPrefix","passwordFile"}]} (ONTO_KAFKA_CONSUMERS for ./onto up)',
      )
      .option('--prune', 'also remove the consumers the file does not declare')
      .action(async (opts: { file: string; prune?: boolean }, cmd: Command) => {
        const { o, users } = consumerUsers(cmd);
        const results = await users.apply(opts.file, opts.prune === true);
        print(io, o.json, results, {
          head: ['name', 'action', 'topics', 'group prefix', 'password file'],
          rows: results.map((r) => [
            r.name,
            r.action,
            r.topics.join(', '),
            r.groupPrefix,
            r.passwordFile === undefined ? '' : `${r.passwordFile}${r.passwordGenerated ? ' (generated)' : ''}`,
          ]),
        });
      }),
  );
  exitHelp(
    consumers
      .command('remove <name>')
      .description("delete the user's credential and its ACLs")
      .action(async (name: string, _opts: unknown, cmd: Command) => {
        const { o, users } = consumerUsers(cmd);
        await users.remove(name);
        print(io, o.json, { removed: name }, { head: ['removed'], rows: [[name]] });
      }),
  );

  // ---------------------------------------------------------------- event-replay
  exitHelp(
    program
      .command('event-replay')
      .description('re-publish the records of an offset range of a topic to the same topic and partitions')
      .requiredOption('--topic <topic>', 'e.g. onto.changes.objects')
      .requiredOption('--from-offset <offset>', 'the first offset replayed', offset)
      .requiredOption('--to-offset <offset>', 'the last offset replayed (inclusive)', offset)
      .option('--partition <n>', 'only this partition (default: every partition, the range in each)', partitionArg)
      .addHelpText('after', REPLAY_HELP)
      .action(
        async (opts: { topic: string; fromOffset: bigint; toOffset: bigint; partition?: number }, cmd: Command) => {
          const { o, kafka, bar, topic } = setup(cmd);
          if (opts.fromOffset > opts.toOffset) {
            throw new AdminError(
              `--from-offset ${opts.fromOffset} is after --to-offset ${opts.toOffset}: nothing replayed`,
              EXIT.usage,
            );
          }
          const tools = kafka();
          const name = topic(opts.topic);
          const log = await tools.log(name);
          const selected = opts.partition === undefined ? log : log.filter((p) => p.partition === opts.partition);
          if (selected.length === 0) {
            throw new AdminError(`${name} has no partition ${opts.partition} (it has ${log.length})`, EXIT.notFound);
          }
          let end = 0n;
          for (const p of selected) if (p.high > end) end = p.high;
          if (opts.toOffset >= end) {
            throw new AdminError(
              `--to-offset ${opts.toOffset} is past the log end of ${name}` +
                `${opts.partition === undefined ? '' : ` partition ${opts.partition}`} (last offset ${end - 1n}): nothing replayed`,
              EXIT.range,
            );
          }
          const gone = selected.find((p) => opts.fromOffset < p.low && p.high > p.low);
          if (gone) {
            throw new AdminError(
              `--from-offset ${opts.fromOffset} is before the log start of ${name} partition ${gone.partition} ` +
                `(offset ${gone.low}; older records were deleted): nothing replayed`,
              EXIT.range,
            );
          }
          const ranges = selected.map((p) => ({
            partition: p.partition,
            from: opts.fromOffset,
            to: opts.toOffset + 1n < p.high ? opts.toOffset + 1n : p.high,
          }));
          const total = ranges.reduce((n, r) => n + Number(r.to > r.from ? r.to - r.from : 0n), 0);
          bar.start(total, `reading ${name}`);
          let read = 0;
          const records = await tools.read(name, ranges, () => bar.update(++read));
          bar.stop();
          await tools.publish(
            records.map((r) => ({
              topic: name,
              partition: r.partition,
              key: r.key,
              value: r.value,
              headers: { ...r.headers, 'onto-replayed-from': `${r.partition}@${r.offset}` },
            })),
          );
          const perPartition = ranges.map((r) => ({
            partition: r.partition,
            from: r.from.toString(),
            to: (r.to - 1n).toString(),
            replayed: records.filter((x) => x.partition === r.partition).length,
          }));
          print(
            io,
            o.json,
            { topic: name, replayed: records.length, partitions: perPartition },
            {
              head: ['partition', 'from', 'to', 'replayed'],
              rows: perPartition.filter((p) => p.replayed > 0).map((p) => [p.partition, p.from, p.to, p.replayed]),
            },
          );
        },
      ),
  );

  // ---------------------------------------------------------------- repairs through the services
  exitHelp(
    program
      .command('schema-reconcile')
      .description(
        "control re-publishes the world's current schema as schema.updated; data and intelligence apply a " +
          'schema by version, so a service that has it changes nothing and one that missed it catches up',
      )
      .requiredOption('--world <world>', 'the world', matching(WORLD, '--world'))
      .action(async (opts: { world: string }, cmd: Command) => {
        const { o, services } = setup(cmd);
        const result = (await services().call(
          'control',
          'POST',
          `/v1/admin/worlds/${opts.world}/schema/republish`,
        )) as { world: string; version: number; eventId: string };
        print(io, o.json, result, {
          head: ['world', 'schema version re-published', 'event'],
          rows: [[result.world, result.version, result.eventId]],
        });
      }),
  );
  exitHelp(
    program
      .command('codegen')
      .description(
        "writes a TypeScript module for @onto/client with the world's types: an interface per object type (its " +
          "series and derived properties beside it), the link types, each action type's parameters, and the schema " +
          'version and signature it was generated from (the client refuses to run against a schema that moved incompatibly)',
      )
      .requiredOption('--world <world>', 'the world', matching(WORLD, '--world'))
      .option(
        '--at <ref>',
        "the schema version to generate from, or a tag of the world (its schema version, from control's tags API); default: the current one",
        (v) => {
          if (/^[0-9]+$/.test(v)) {
            if (!/^[1-9]\d{0,9}$/.test(v)) throw new InvalidArgumentError('a schema version is a whole number ≥ 1');
            return Number(v);
          }
          if (!/^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$/.test(v)) {
            throw new InvalidArgumentError('must be a schema version (a whole number ≥ 1) or a tag name');
          }
          return v;
        },
      )
      .requiredOption('--out <dir>', 'the directory to write <world>.ts into')
      .option('--client <module>', 'where the generated module imports the client from', '@onto/client')
      .action(async (opts: { world: string; at?: number | string; out: string; client: string }, cmd: Command) => {
        const { o, services } = setup(cmd);
        const api = services();
        // A tag names a schema version (its ref's control part): the module is the schema the tag saw.
        const version =
          typeof opts.at === 'string'
            ? (
                (await api.call('control', 'GET', `/v1/worlds/${opts.world}/tags/${encodeURIComponent(opts.at)}`)) as {
                  ref: { control: number };
                }
              ).ref.control
            : opts.at;
        const schema = (await api.call(
          'control',
          'GET',
          `/v1/worlds/${opts.world}/schema${version === undefined ? '' : `?version=${version}`}`,
        )) as CodegenSchema;
        const { derivedProperties } = (await api.call(
          'intelligence',
          'GET',
          `/v1/worlds/${opts.world}/derived-properties`,
        )) as { derivedProperties: CodegenDerived[] };
        const module = generateWorldModule({
          world: opts.world,
          schema,
          derived: derivedProperties,
          clientImport: opts.client,
        });
        await mkdir(opts.out, { recursive: true });
        const file = join(opts.out, `${opts.world}.ts`);
        await writeFile(file, module);
        const result = {
          world: opts.world,
          schemaVersion: schema.version,
          file,
          objectTypes: Object.keys(schema.objectTypes).length,
          linkTypes: Object.keys(schema.linkTypes).length,
          actionTypes: Object.keys(schema.actionTypes).length,
          derivedProperties: derivedProperties.length,
        };
        print(io, o.json, result, {
          head: ['world', 'schema version', 'file', 'object types', 'link types', 'action types', 'derived'],
          rows: [Object.values(result)],
        });
      }),
  );
  for (const kind of [
    { command: 'object-recount', path: 'object-types', noun: 'objects', of: 'object type', event: 'object.announced' },
    { command: 'link-recount', path: 'link-types', noun: 'links', of: 'link type', event: 'link.announced' },
  ] as const) {
    exitHelp(
      program
        .command(kind.command)
        .description(
          `data counts the live ${kind.noun} of a${kind.of === 'object type' ? 'n' : ''} ${kind.of} and re-announces each ` +
            `(${kind.event}, its current version); intelligence's read model takes those it lacks and ignores those ` +
            "it has. Waits until intelligence's count matches (--timeout), unless --no-wait.",
        )
        .requiredOption('--world <world>', 'the world', matching(WORLD, '--world'))
        .requiredOption('--type <type>', `the ${kind.of}`, matching(NAME, '--type'))
        .option('--no-wait', 'do not wait for intelligence to match')
        .action(async (opts: { world: string; type: string; wait: boolean }, cmd: Command) => {
          const { o, services, bar } = setup(cmd);
          const api = services();
          const countPath = `/v1/admin/worlds/${opts.world}/${kind.path}/${opts.type}/count`;
          const intelligenceCount = async () =>
            ((await api.call('intelligence', 'GET', countPath)) as { count: number }).count;
          const before = await intelligenceCount();
          const recount = (await api.call(
            'data',
            'POST',
            `/v1/admin/worlds/${opts.world}/${kind.path}/${opts.type}/recount`,
          )) as { count: number; announced: number };
          let after = before;
          if (opts.wait) {
            const deadline = Date.now() + o.timeout * 1000;
            bar.start(recount.count, `intelligence taking ${opts.type}`);
            for (;;) {
              after = await intelligenceCount();
              bar.update(Math.min(after, recount.count));
              if (after === recount.count || Date.now() > deadline) break;
              await sleep(250);
            }
            bar.stop();
          }
          const result = {
            world: opts.world,
            type: opts.type,
            data: recount.count,
            announced: recount.announced,
            intelligenceBefore: before,
            intelligenceAfter: opts.wait ? after : null,
            consistent: opts.wait ? after === recount.count : null,
          };
          print(io, o.json, result, {
            head: ['world', 'type', 'data', 'announced', 'intelligence before', 'intelligence after'],
            rows: [[result.world, result.type, result.data, result.announced, before, result.intelligenceAfter ?? '-']],
          });
          if (opts.wait && after !== recount.count) {
            throw new AdminError(
              `intelligence holds ${after} ${opts.type} ${kind.noun}, data ${recount.count}, after ${o.timeout} s` +
                (after > recount.count
                  ? ` (intelligence holds ${kind.noun} data no longer has: a delete it missed)`
                  : ''),
              EXIT.timeout,
            );
          }
        }),
    );
  }
  exitHelp(
    program
      .command('derived-recalc')
      .description('intelligence recomputes a derived property for every object of its type now, and waits (--timeout)')
      .requiredOption('--world <world>', 'the world', matching(WORLD, '--world'))
      .requiredOption('--property <name>', 'the derived property', matching(NAME, '--property'))
      .action(async (opts: { world: string; property: string }, cmd: Command) => {
        const { o, services, bar } = setup(cmd);
        const api = services();
        const started = (await api.call(
          'intelligence',
          'POST',
          `/v1/admin/worlds/${opts.world}/derived-properties/${opts.property}/recompute`,
        )) as { objectType: string };
        const total = (
          (await api.call(
            'intelligence',
            'GET',
            `/v1/admin/worlds/${opts.world}/object-types/${started.objectType}/count`,
          )) as {
            count: number;
          }
        ).count;
        const deadline = Date.now() + o.timeout * 1000;
        bar.start(total, `recomputing ${opts.property}`);
        let progressNow: { pending: boolean; processed: number; finishedAt: string | null } | undefined;
        for (;;) {
          const def = (await api.call(
            'intelligence',
            'GET',
            `/v1/worlds/${opts.world}/derived-properties/${opts.property}`,
          )) as { recompute?: { pending: boolean; processed: number; finishedAt: string | null } | null };
          progressNow = def.recompute ?? undefined;
          bar.update(Math.min(progressNow?.processed ?? 0, total));
          if ((progressNow && !progressNow.pending) || Date.now() > deadline) break;
          await sleep(250);
        }
        bar.stop();
        const result = {
          world: opts.world,
          property: opts.property,
          objectType: started.objectType,
          objects: total,
          processed: progressNow?.processed ?? 0,
          finishedAt: progressNow?.finishedAt ?? null,
        };
        print(io, o.json, result, {
          head: ['world', 'property', 'object type', 'objects', 'recomputed', 'finished at'],
          rows: [[result.world, result.property, result.objectType, total, result.processed, result.finishedAt ?? '-']],
        });
        if (!result.finishedAt) {
          throw new AdminError(`the recompute of ${opts.property} has not finished after ${o.timeout} s`, EXIT.timeout);
        }
      }),
  );
  exitHelp(
    program
      .command('merge-verify')
      .description(
        'recompute a MERGED merge from its base, source and target and compare it with the target: control checks ' +
          'the schema, data the objects and links, intelligence the definitions. Waits for their reports ' +
          '(--timeout); exit 9 when any differs.',
      )
      .requiredOption('--world <world>', 'the target world of the merge', matching(WORLD, '--world'))
      .requiredOption('--merge-id <id>', 'the merge (a uuid)', matching(UUID, '--merge-id'))
      .action(async (opts: { world: string; mergeId: string }, cmd: Command) => {
        const { o, services } = setup(cmd);
        const api = services();
        const path = `/v1/admin/worlds/${opts.world}/merges/${opts.mergeId}/verify`;
        let verification = (await api.call('control', 'POST', path)) as MergeVerification;
        const deadline = Date.now() + o.timeout * 1000;
        while (!verification.complete && Date.now() < deadline) {
          await sleep(250);
          verification = (await api.call('control', 'GET', path)) as MergeVerification;
        }
        const rows = (['control', 'data', 'intelligence'] as const).map((s) => {
          const r = verification.services[s];
          return [s, r?.checked ?? 'no report', r?.differences ?? '-', r?.sample[0] ? JSON.stringify(r.sample[0]) : ''];
        });
        print(io, o.json, verification, { head: ['service', 'checked', 'differences', 'first difference'], rows });
        if (!verification.complete) {
          throw new AdminError(
            `not every service reported on merge ${opts.mergeId} within ${o.timeout} s`,
            EXIT.timeout,
          );
        }
        if (verification.differences > 0) {
          throw new AdminError(
            `merge ${opts.mergeId}: ${verification.differences} difference(s) between the recomputed merge and ${opts.world}`,
            EXIT.differences,
          );
        }
      }),
  );

  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (error) {
    if (error instanceof CommanderError) {
      // --help and --version end here with 0; a usage error has been printed by commander.
      exitCode = error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    } else if (error instanceof AdminError) {
      io.stderr.write(`onto-admin: ${error.message}\n`);
      exitCode = error.exitCode;
    } else {
      const message = (error as Error).message ?? String(error);
      // An authenticated broker closes an anonymous client's connection without saying why.
      const hint =
        /Closed connection/.test(message) && env.KAFKA_SASL_USERNAME === undefined
          ? ' (an authenticated broker? log in with KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD)'
          : '';
      io.stderr.write(`onto-admin: ${message}${hint}\n`);
      exitCode = EXIT.failure;
    }
  } finally {
    for (const cleanup of cleanups) await cleanup();
  }
  return exitCode;
}

/** The DLQ's log; an absent DLQ is empty (nothing ever dead-lettered), its original topic must exist. */
async function dlqLog(tools: KafkaTools, dlq: string): Promise<PartitionLog[]> {
  const original = dlq.slice(0, -'.dlq'.length);
  if (!(await tools.exists(original))) throw new AdminError(`topic ${original} does not exist`, EXIT.notFound);
  if (!(await tools.exists(dlq))) return [];
  return tools.log(dlq);
}

async function readDlq(
  tools: KafkaTools,
  topic: string,
  bar: ReturnType<typeof progress>,
  known?: PartitionLog[],
): Promise<KafkaRecord[]> {
  const log = known ?? (await dlqLog(tools, dlqOf(topic)));
  const total = log.reduce((n, p) => n + Number(p.high - p.low), 0);
  if (total === 0) return [];
  bar.start(total, `reading ${dlqOf(topic)}`);
  let read = 0;
  const records = await tools.read(
    dlqOf(topic),
    log.map((p) => ({ partition: p.partition, from: p.low, to: p.high })),
    () => bar.update(++read),
  );
  bar.stop();
  return records;
}
