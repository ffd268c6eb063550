import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { repo, ruleFiles, rulesDir, ruleTests } from './monitoring.js';

const run = promisify(execFile);

/** promtool from Debian's prometheus package, which ./onto test installs when it is missing. */
async function promtool(...args: string[]) {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd: repo });
    return `${stdout}${stderr}`;
  } catch (error) {
    const e = error as NodeJS.ErrnoException & { stdout?: string; stderr?: string };
    if (e.code === 'ENOENT')
      throw new Error('promtool is not installed: ./onto test installs it (Debian package prometheus)');
    throw new Error(`promtool ${args.join(' ')} failed:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

describe('Prometheus rules and configuration', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'onto-promtool-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('are valid rule files', async () => {
    const files = ruleFiles().map((f) => join(rulesDir, f));
    expect(files.length).toBeGreaterThan(0);
    expect(await promtool('check', 'rules', ...files)).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('pass their unit tests', async () => {
    expect(await promtool('test', 'rules', join(ruleTests, 'onto.test.yml'))).toMatch(/SUCCESS/);
  });

  it('fail a unit test whose threshold is moved', async () => {
    // the rule tests can fail: the same tests over the rules with the lag warning at 1,200
    const moved = readFileSync(join(rulesDir, 'onto.yml'), 'utf8').replace(
      'onto_consumer_lag)) > 1000\n',
      'onto_consumer_lag)) > 1200\n',
    );
    expect(moved).toContain('> 1200');
    writeFileSync(join(scratch, 'onto.yml'), moved);
    const tests = readFileSync(join(ruleTests, 'onto.test.yml'), 'utf8').replace('../rules/onto.yml', 'onto.yml');
    writeFileSync(join(scratch, 'onto.test.yml'), tests);
    await expect(promtool('test', 'rules', join(scratch, 'onto.test.yml'))).rejects.toThrow(/OntoConsumerLagWarning/);
  });

  it('configure the local Prometheus of ./onto up --monitoring', async () => {
    // rendered as ./onto renders it
    const config = readFileSync(join(repo, 'infra/prometheus/prometheus.yml'), 'utf8').replaceAll(
      '@RULES_DIR@',
      rulesDir,
    );
    writeFileSync(join(scratch, 'prometheus.yml'), config);
    expect(await promtool('check', 'config', join(scratch, 'prometheus.yml'))).toMatch(/SUCCESS: \d+ rules found/);
  });

  it("configure docker-compose's Prometheus", async () => {
    const file = join(repo, 'infra/prometheus/prometheus.compose.yml');
    expect(await promtool('check', 'config', '--syntax-only', file)).toMatch(/valid prometheus config file syntax/);
  });
});
