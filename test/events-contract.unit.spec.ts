import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Parser } from '@asyncapi/parser';
import {
  asyncApiDocument,
  breakingChanges,
  compatibilityReport,
  currentSchemaLock,
  EVENT_TYPES,
  keyParts,
  PRODUCERS,
  type SchemaLock,
  TOPIC_NAMES,
  TRACEPARENT_PATTERN,
} from '@onto/shared';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const committed = (path: string) => JSON.parse(readFileSync(join(root, path), 'utf8'));
const clone = <T>(value: T): T => structuredClone(value);

describe('the AsyncAPI document', () => {
  it('is committed as generated: run `pnpm run events docs` after changing a topic or an event schema', () => {
    expect(committed('docs/asyncapi.json')).toEqual(asyncApiDocument());
  });

  it('is valid for the official AsyncAPI parser, whole and per service', { timeout: 120_000 }, async () => {
    const parser = new Parser();
    for (const doc of [asyncApiDocument(), ...PRODUCERS.map((p) => asyncApiDocument(p))]) {
      const { document, diagnostics } = await parser.parse(JSON.stringify(doc));
      // Severity 0 is an error; warnings and hints do not make a document invalid.
      expect(diagnostics.filter((d) => d.severity === 0)).toEqual([]);
      expect(document?.version()).toBe('3.0.0');
    }
  });

  it('has every topic, its key, every event type as a message, and who produces and consumes it', async () => {
    const { document } = await new Parser().parse(JSON.stringify(asyncApiDocument()));
    if (!document) throw new Error('no document');
    const channels = document.channels();
    for (const topic of TOPIC_NAMES) {
      const channel = channels.get(topic);
      expect(channel?.address()).toBe(topic);
      const types = Object.keys(EVENT_TYPES).filter((t) => EVENT_TYPES[t as keyof typeof EVENT_TYPES] === topic);
      expect(
        channel
          ?.messages()
          .all()
          .map((m) => m.id())
          .sort(),
      ).toEqual(types.sort());
      expect(channel?.description()).toContain(
        `Key: ${keyParts(topic)
          .map((p) => `{${p}}`)
          .join('/')}`,
      );
    }
    expect(keyParts('onto.changes.objects')).toEqual(['worldId', 'objectType', 'pk']);
    const sends = document
      .operations()
      .filterBySend()
      .map((o) => o.id());
    const receives = document
      .operations()
      .filterByReceive()
      .map((o) => o.id());
    expect(sends).toContain('data.send.onto.changes.objects');
    expect(sends).toContain('intelligence.send.onto.changes.objects.dlq');
    expect(receives).toContain('intelligence-changes.receive.onto.changes.objects');
    const message = document
      .messages()
      .all()
      .find((m) => m.id() === 'object.created');
    expect(message?.headers()?.required()).toContain('ce_type');
    // The CloudEvents distributed-tracing extension: optional, a W3C traceparent when present.
    expect(message?.headers()?.required()).not.toContain('traceparent');
    expect(message?.headers()?.properties()?.traceparent?.pattern()).toBe(TRACEPARENT_PATTERN);
    expect(message?.payload()?.properties()?.payload?.required()).toContain('after');
  });

  it('per service, has only the topics it produces and the dead letters it writes', () => {
    const control = asyncApiDocument('control');
    expect(Object.keys(control.channels as object)).toEqual([
      'onto.schema',
      'onto.worlds',
      'onto.identity',
      'onto.storage.dlq',
      'onto.intelligence.dlq',
      'onto.audit',
      'onto.audit.dlq',
    ]);
    // Every service publishes its audit records; only control consumes them (docs/adr/0084).
    for (const service of PRODUCERS) {
      expect(Object.keys(asyncApiDocument(service).channels as object), service).toContain('onto.audit');
    }
  });
});

describe('schema compatibility with the previous release', () => {
  const previous = committed('docs/events/schemas.lock.json') as SchemaLock;

  it('holds: the current schemas break nothing of docs/events/schemas.lock.json', () => {
    const report = compatibilityReport(previous, currentSchemaLock());
    expect(report.text).toMatch(new RegExp(`^compatible: ${Object.keys(previous.events).length} event types`, 'm'));
    expect(report.ok).toBe(true);
  });

  const changed = (edit: (lock: SchemaLock) => void) => {
    const next = clone(previous);
    edit(next);
    return breakingChanges(previous, next);
  };
  const payloadOf = (lock: SchemaLock, type: string) => {
    const entry = lock.events[type];
    if (!entry) throw new Error(`no ${type} in the lock`);
    return (entry.schema.properties as Record<string, unknown>).payload as {
      properties: Record<string, Record<string, unknown>>;
      required: string[];
    };
  };

  it('lets an event type gain an optional field, and a new event type appear', () => {
    expect(
      changed((lock) => {
        payloadOf(lock, 'alert.raised').properties.note = { type: 'string' };
        lock.events['alert.escalated'] = clone(lock.events['alert.raised'] as SchemaLock['events'][string]);
      }),
    ).toEqual([]);
  });

  it('catches a removed field, a changed type, a newly required field, a narrowed enum and a removed type', () => {
    const found = changed((lock) => {
      const alert = payloadOf(lock, 'alert.raised');
      delete alert.properties.severity;
      alert.required = alert.required.filter((f) => f !== 'severity');
      payloadOf(lock, 'object.created').properties.version = { type: 'string' };
      const decision = payloadOf(lock, 'decision.made');
      decision.required.push('reason');
      const statuses = decision.properties.status as { anyOf: { const: string }[] };
      statuses.anyOf = statuses.anyOf.filter((s) => s.const !== 'REJECTED');
      delete lock.events['world.deleted'];
    });
    expect(found).toEqual([
      { type: 'alert.raised', path: '/payload/severity', change: 'field removed' },
      { type: 'decision.made', path: '/payload/status', change: expect.stringMatching(/^no longer allows "REJECTED"/) },
      { type: 'decision.made', path: '/payload/reason', change: 'field newly required: older events lack it' },
      { type: 'object.created', path: '/payload/version', change: 'type was integer, is now string' },
      { type: 'world.deleted', path: '', change: 'event type removed (v1)' },
    ]);
  });

  it('fails the check script on a breaking change, printing what broke', () => {
    // The script compares the code's schemas with a lock: a lock with a field the code lacks is
    // the same breaking change as the code dropping it.
    const addedToLock = clone(previous);
    payloadOf(addedToLock, 'object.updated').properties.legacy = { type: 'string' };
    const dir = mkdtempSync(join(tmpdir(), 'onto-lock-'));
    writeFileSync(join(dir, 'lock.json'), JSON.stringify(addedToLock));
    let output = '';
    let status = 0;
    try {
      execFileSync(
        'node',
        ['--conditions=@onto/source', '--import', 'tsx', 'scripts/events.ts', 'check', join(dir, 'lock.json')],
        {
          cwd: root,
          encoding: 'utf8',
        },
      );
    } catch (error) {
      const failed = error as { status: number; stdout: string };
      status = failed.status;
      output = failed.stdout;
    }
    expect(status).toBe(1);
    expect(output).toContain('BREAKING object.updated v1 /payload/legacy: field removed');
    expect(output).toContain('1 breaking change(s)');
  });
});
