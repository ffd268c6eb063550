import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/** The repository's monitoring files, as the specs read them. */
export const repo = fileURLToPath(new URL('..', import.meta.url));
export const rulesDir = join(repo, 'infra/prometheus/rules');
export const ruleTests = join(repo, 'infra/prometheus/tests');
export const dashboardFile = join(repo, 'infra/grafana/dashboards/onto.json');

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export interface RuleFile {
  groups: { name: string; rules: AlertRule[] }[];
}

export const ruleFiles = () => readdirSync(rulesDir).filter((f) => f.endsWith('.yml'));

export const readRules = (file: string) => parse(readFileSync(join(rulesDir, file), 'utf8')) as RuleFile;

export const alertRules = () => ruleFiles().flatMap((f) => readRules(f).groups.flatMap((g) => g.rules));

export interface DashboardPanel {
  title: string;
  targets: { expr: string }[];
}

export const dashboardExpressions = () =>
  (JSON.parse(readFileSync(dashboardFile, 'utf8')) as { panels: DashboardPanel[] }).panels.flatMap((p) =>
    p.targets.map((t) => ({ panel: p.title, expr: t.expr })),
  );
