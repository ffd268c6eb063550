import { Writable } from 'node:stream';
import { main } from '../src/main.js';

export interface CliRun {
  code: number;
  out: string;
  err: string;
  /** The stdout parsed, as loosely typed as JSON.parse: the tests assert its shape. */
  json: () => ReturnType<typeof JSON.parse>;
}

/** Runs the CLI in process as a script would, after the given global options: exit code, stdout and stderr. */
export function runCli(globals: string[], ...args: string[]): Promise<CliRun> {
  return runCliIn({}, globals, ...args);
}

/** runCli with these environment variables (e.g. KAFKA_SASL_*). */
export async function runCliIn(env: NodeJS.ProcessEnv, globals: string[], ...args: string[]): Promise<CliRun> {
  let out = '';
  let err = '';
  const sink = (append: (s: string) => void) =>
    new Writable({
      write(chunk, _enc, done) {
        append(String(chunk));
        done();
      },
    });
  const code = await main(
    [...globals, ...args],
    {
      stdout: sink((s) => {
        out += s;
      }),
      stderr: sink((s) => {
        err += s;
      }),
    },
    env,
  );
  return { code, out, err, json: () => JSON.parse(out) };
}
