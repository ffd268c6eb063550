/**
 * A task that runs in this process only, every `periodMs`: what each instance must do for itself
 * (its memory, its connections, its clients) and the job runner (docs/adr/0051), which runs a
 * recurring job once per period across all instances, cannot. The one place a service's
 * per-process loops are timed: rounds never overlap (the next is timed from the end of the last),
 * a failed round is logged once per streak, the timer never holds the process open, and `stop`
 * ends it for good.
 */
export interface InProcessTask {
  stop(): void;
}

export function everyInProcess(
  what: string,
  periodMs: number,
  task: () => unknown,
  logger?: { warn(obj: object, msg: string): void; info?(msg: string): void },
): InProcessTask {
  if (!(periodMs > 0)) throw new Error(`the period of ${what} must be positive`);
  let stopped = false;
  let failing = false;
  let timer: NodeJS.Timeout | undefined;
  const round = async () => {
    try {
      await task();
      if (failing) logger?.info?.(`${what} works again`);
      failing = false;
    } catch (err) {
      if (!failing) logger?.warn({ err }, `${what} failed; trying again every ${periodMs} ms`);
      failing = true;
    }
  };
  const next = () => {
    if (stopped) return;
    timer = setTimeout(() => void round().finally(next), periodMs);
    timer.unref();
  };
  next();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
