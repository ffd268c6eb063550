/**
 * A guard against performance regressions: runs the relay, consumer and single-PUT benchmarks
 * briefly and compares each ratio (onto ÷ its reference, measured in the same run) with the last
 * one recorded on a machine of the same kind. Exits 1 when a ratio fell more than 20 % below it.
 *
 *   ./onto bench ci              compare with bench/ci-baseline.json
 *   ./onto bench ci --record     the same, then record these figures as the machine's baseline
 *                                and append them, with the commit, to bench/RESULTS.md
 *
 * Not part of `.ci/run`: a shared or noisy machine moves these ratios by more than 20 %. Run it
 * on a quiet machine before and after a change to a hot path (the relay, the consumer, data's
 * PUT), and record after a change that moves a figure on purpose. BENCH_CI_ROWS (50000) and
 * BENCH_CI_SECONDS (5) size the runs; BENCH_CI_TOLERANCE (0.2) is the fall that fails.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { repo } from './lib/harness.js';

type Figures = Record<string, number>;
interface Baseline {
  commit: string;
  date: string;
  results: Record<string, Figures>;
}

const record = process.argv.includes('--record');
const tolerance = Number(process.env.BENCH_CI_TOLERANCE ?? 0.2);
const runs: [bench: string, args: string[]][] = [
  ['relay', [process.env.BENCH_CI_ROWS ?? '50000']],
  ['data-put', [process.env.BENCH_CI_SECONDS ?? '5']],
];
/** The figures compared: ratios, where higher is better. The others are printed and recorded. */
const compared = (name: string) => name.includes('÷');

// A machine kind: what the ratios depend on (cores, memory, processor), not its name.
const machine = `${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB, ${cpus()[0]?.model.trim() ?? 'unknown CPU'}`;
const baselineFile = join(repo, 'bench/ci-baseline.json');
const baselines: Record<string, Baseline> = existsSync(baselineFile)
  ? JSON.parse(readFileSync(baselineFile, 'utf8'))
  : {};
const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim();

const results: Record<string, Figures> = {};
const resultFile = join(mkdtempSync(join(tmpdir(), 'onto-bench-ci-')), 'results.jsonl');
for (const [bench, args] of runs) {
  console.log(`--- ${bench} ${args.join(' ')}`);
  const run = spawnSync(process.execPath, [...process.execArgv, join(repo, `bench/${bench}.ts`), ...args], {
    cwd: repo,
    stdio: 'inherit',
    env: { ...process.env, BENCH_RESULT_FILE: resultFile },
  });
  if (run.status !== 0) {
    console.error(`bench ci: ${bench} failed (exit ${run.status})`);
    process.exit(2);
  }
}
for (const line of readFileSync(resultFile, 'utf8').trim().split('\n')) {
  const { bench, figures } = JSON.parse(line) as { bench: string; figures: Figures };
  results[bench] = figures;
}

const base = baselines[machine];
const fmt = (n: number | undefined) => (n === undefined ? '' : n.toFixed(2));
const rows: string[] = [];
const fell: string[] = [];
for (const [bench, figures] of Object.entries(results)) {
  for (const [name, value] of Object.entries(figures)) {
    const before = base?.results[bench]?.[name];
    const floor = before === undefined ? undefined : before * (1 - tolerance);
    const bad = compared(name) && floor !== undefined && value < floor;
    if (bad) fell.push(`${bench}: ${name} ${fmt(value)} < ${fmt(floor)} (${fmt(before)} at ${base?.commit})`);
    rows.push(`| ${bench} | ${name} | ${fmt(value)} | ${fmt(before)} | ${bad ? 'fell' : compared(name) ? 'ok' : ''} |`);
  }
}
console.log(`\nmachine: ${machine}; baseline: ${base ? `${base.commit} (${base.date})` : 'none recorded'}`);
console.log('| benchmark | figure | now | baseline | |');
console.log('|---|---|---:|---:|---|');
for (const row of rows) console.log(row);

if (record) {
  const date = new Date().toISOString().slice(0, 10);
  baselines[machine] = { commit, date, results };
  writeFileSync(baselineFile, `${JSON.stringify(baselines, null, 2)}\n`);
  const figures = Object.entries(results)
    .flatMap(([bench, f]) => Object.entries(f).map(([name, v]) => `${bench} ${name} ${fmt(v)}`))
    .join('; ');
  appendFileSync(join(repo, 'bench/RESULTS.md'), `| ${date} | ${commit} | ${machine} | ${figures} |\n`);
  console.log(`recorded as the baseline of this machine kind (bench/ci-baseline.json, bench/RESULTS.md)`);
}
if (fell.length > 0) {
  console.error(`\nbench ci: ${fell.length} ratio(s) fell more than ${tolerance * 100} %:\n  ${fell.join('\n  ')}`);
  process.exit(1);
}
