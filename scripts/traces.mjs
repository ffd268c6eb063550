#!/usr/bin/env node
// Reads the spans `./onto up --tracing` writes (ONTO_TRACES_FILE: a JSON line per span, one file
// per service) and prints them: without an argument the latest traces, one line each; with a trace
// id (or an x-request-id of a request in it) that trace as a tree, each span under its parent,
// across services (docs/operations-tracing.md).
//   node scripts/traces.mjs <folder or file>... [trace-id | request-id] [--limit n]
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const args = process.argv.slice(2);
const limitAt = args.indexOf('--limit');
const limit = limitAt >= 0 ? Number(args.splice(limitAt, 2)[1]) : 20;
const paths = args.filter((a) => existsAsPath(a));
const wanted = args.find((a) => !paths.includes(a));

function existsAsPath(p) {
  try {
    statSync(p);
    return true;
  } catch {
    return false;
  }
}

const files = paths.flatMap((p) =>
  statSync(p).isDirectory()
    ? readdirSync(p)
        .filter((f) => f.endsWith('.jsonl'))
        .map((f) => join(p, f))
    : [p],
);
if (files.length === 0) {
  console.error('no span files: start the stack with ./onto up --tracing, then make a request');
  process.exit(2);
}
const spans = [];
for (const file of files) {
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    try {
      spans.push(JSON.parse(line));
    } catch {
      // a line cut short by a crash: skipped
    }
  }
}
const byTrace = new Map();
for (const s of spans) {
  const list = byTrace.get(s.traceId) ?? [];
  list.push(s);
  byTrace.set(s.traceId, list);
}
const ms = (us) => (us / 1000).toFixed(1);

if (!wanted) {
  const traces = [...byTrace.values()]
    .map((list) => {
      const start = Math.min(...list.map((s) => s.startUs));
      const end = Math.max(...list.map((s) => s.startUs + s.durationUs));
      const ids = new Set(list.map((s) => s.spanId));
      const root = list.find((s) => !s.parentSpanId || !ids.has(s.parentSpanId));
      return { list, start, end, root };
    })
    .sort((a, b) => b.start - a.start)
    .slice(0, limit);
  for (const t of traces) {
    const services = [...new Set(t.list.map((s) => s.service))].join(',');
    console.log(
      `${new Date(t.start / 1000).toISOString()}  ${t.list[0].traceId}  ${String(t.list.length).padStart(3)} spans  ` +
        `${ms(t.end - t.start).padStart(8)} ms  ${services}  ${t.root?.name ?? ''}`,
    );
  }
  process.exit(0);
}

const list =
  byTrace.get(wanted) ?? [...byTrace.values()].find((l) => l.some((s) => s.attributes?.['onto.request_id'] === wanted));
if (!list) {
  console.error(`no trace ${wanted} in ${files.join(', ')}`);
  process.exit(3);
}
const ids = new Set(list.map((s) => s.spanId));
const children = new Map();
for (const s of list) {
  const parent = s.parentSpanId && ids.has(s.parentSpanId) ? s.parentSpanId : null;
  const siblings = children.get(parent) ?? [];
  siblings.push(s);
  children.set(parent, siblings);
}
const start = Math.min(...list.map((s) => s.startUs));
console.log(`trace ${list[0].traceId}: ${list.length} spans`);
const print = (parent, depth) => {
  for (const s of (children.get(parent) ?? []).sort((a, b) => a.startUs - b.startUs)) {
    const a = s.attributes ?? {};
    const detail = [
      a['http.response.status_code'] && `status ${a['http.response.status_code']}`,
      a['messaging.message.id'] && `event ${a['messaging.message.id']}`,
      a['messaging.kafka.offset'] !== undefined &&
        `offset ${a['messaging.destination.partition.id']}@${a['messaging.kafka.offset']}`,
      s.status === 'ERROR' && `ERROR ${s.statusMessage ?? ''}`,
    ]
      .filter(Boolean)
      .join(', ');
    console.log(
      `+${ms(s.startUs - start).padStart(8)} ms ${ms(s.durationUs).padStart(8)} ms  ${'  '.repeat(depth)}` +
        `${s.service} ${s.kind} ${s.name}${detail ? `  (${detail})` : ''}`,
    );
    print(s.spanId, depth + 1);
  }
};
print(null, 0);
