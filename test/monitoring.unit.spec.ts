import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { alertRules, dashboardExpressions, repo } from './monitoring.js';
import { SERVICES } from './services.js';

/** Metric names the alerts and the dashboard use before any service exports them, and who will. */
const COMING = {
  onto_merge_conflict_rate: 'the merge saga (issue 17)',
};

/** Every `name: 'onto_…'` a metric constructor is given in the workspace's sources. */
function exportedMetricNames(): Set<string> {
  const names = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      const path = join(dir, entry);
      if (statSync(path).isDirectory()) walk(path);
      else if (path.endsWith('.ts')) {
        for (const m of readFileSync(path, 'utf8').matchAll(/name: '([a-z_]+)'/g)) names.add(m[1] as string);
      }
    }
  };
  for (const root of ['packages/shared/src', ...SERVICES.map((s) => `services/${s.name}/src`)]) walk(join(repo, root));
  return names;
}

/** The onto_ series an expression reads, without the _bucket/_sum/_count of histograms. */
const seriesIn = (expr: string) => [...expr.matchAll(/\b(onto_[a-z_]+)/g)].map((m) => m[1] as string);

describe('alert rules and dashboard', () => {
  const rules = alertRules();
  const byName = new Map(rules.map((r) => [r.alert, r]));

  it('alert on the thresholds of the design', () => {
    const thresholds: [string, RegExp][] = [
      ['OntoConsumerLagWarning', /onto_consumer_lag\)\) > 1000$/],
      ['OntoConsumerLagCritical', /onto_consumer_lag\)\) > 10000$/],
      ['OntoVersionVectorSpread', /onto_version_vector_spread\) > 5$/],
      ['OntoDerivedStale', /onto_derived_staleness_seconds\) > 60$/],
      ['OntoMergeConflictRate', /onto_merge_conflict_rate\) > 0\.1$/],
      ['OntoIdempotencyKeyHitRate', /outcome="replayed"[\s\S]*\) > 0\.1$/],
      ['OntoOutboxOldestRowAge', /onto_outbox_oldest_pending_age_seconds\) > 60$/],
      ['OntoDeadLetterTopicNotEmpty', /onto_dlq_depth\) > 0$/],
      ['OntoCheckerFindings', /onto_checker_findings\{kind!~"outbox_stale\|dlq_depth"\}\) > 0$/],
    ];
    for (const [alert, threshold] of thresholds) expect(byName.get(alert)?.expr.trim(), alert).toMatch(threshold);
  });

  it('give every alert a severity, a summary and what to do', () => {
    expect(rules.length).toBeGreaterThanOrEqual(9);
    for (const rule of rules) {
      expect(['warning', 'critical'], rule.alert).toContain(rule.labels.severity);
      expect(rule.annotations.summary, rule.alert).toBeTruthy();
      expect(rule.annotations.description, rule.alert).toMatch(/onto|check|look/i);
    }
  });

  it('read only metrics the services export, or the ones named as coming', () => {
    const exported = exportedMetricNames();
    expect(exported).toContain('onto_consumer_lag');
    const used = new Set([...rules.map((r) => r.expr), ...dashboardExpressions().map((d) => d.expr)].flatMap(seriesIn));
    // A histogram's series are its name with _bucket, _sum or _count.
    const histogramOf = (name: string) => name.replace(/_(bucket|sum|count)$/, '');
    const missing = [...used].filter(
      (name) => !exported.has(name) && !exported.has(histogramOf(name)) && !(name in COMING),
    );
    expect(missing).toEqual([]);
  });

  it('chart every metric an alert reads', () => {
    const charted = new Set(dashboardExpressions().flatMap((d) => seriesIn(d.expr)));
    for (const rule of rules) for (const name of seriesIn(rule.expr)) expect(charted, rule.alert).toContain(name);
  });
});

describe('docker-compose.yml monitoring profile', () => {
  const compose = parse(readFileSync(join(repo, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<string, { profiles?: string[]; volumes?: string[]; ports?: string[] }>;
  };
  const scrape = parse(readFileSync(join(repo, 'infra/prometheus/prometheus.compose.yml'), 'utf8')) as {
    scrape_configs: { static_configs: { targets: string[]; labels: { service: string } }[] }[];
  };

  it('runs Prometheus and Grafana only when asked, on localhost', () => {
    for (const name of ['prometheus', 'grafana']) {
      expect(compose.services[name]?.profiles, name).toEqual(['monitoring']);
      for (const port of compose.services[name]?.ports ?? []) expect(port, name).toMatch(/^127\.0\.0\.1:/);
    }
    for (const s of SERVICES) expect(compose.services[s.name]?.profiles, s.name).toBeUndefined();
  });

  it('mounts files that exist', () => {
    for (const name of ['prometheus', 'grafana']) {
      for (const volume of compose.services[name]?.volumes ?? []) {
        const source = volume.split(':')[0] as string;
        expect(existsSync(join(repo, source)), `${name}: ${source}`).toBe(true);
      }
    }
  });

  it('scrapes each service on its compose host name and port', () => {
    const targets = scrape.scrape_configs.flatMap((c) => c.static_configs);
    expect(targets.map((t) => [t.labels.service, t.targets])).toEqual(
      SERVICES.map((s) => [s.name, [`${s.name}:${s.port}`]]),
    );
  });
});
