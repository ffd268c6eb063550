import { existsSync } from 'node:fs';

/**
 * Whether the compiled files a spec runs as real processes exist. Locally a spec without them is
 * skipped (`describe.runIf`); under CI their absence fails the spec file, so that a build step
 * missing from CI never turns a crash test into a silent skip.
 */
export function builtForProcesses(files: string[]): boolean {
  const missing = files.filter((file) => !existsSync(file));
  if (missing.length > 0 && process.env.CI) {
    throw new Error(`run \`pnpm run build\` before this spec: ${missing.join(', ')} missing`);
  }
  return missing.length === 0;
}
