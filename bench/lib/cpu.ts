/**
 * CPU time spent by each part of the stack over an interval, from /proc (Linux): the services
 * by their entry point, PostgreSQL's processes, the Kafka broker, and this benchmark itself.
 * Latency on a 2-core VM moves with everything else the VM does. Below saturation, the CPU a
 * write costs the whole stack is steadier, and is what a change to the pipeline should lower;
 * once the cores are saturated it is only their time divided by the rate (ADR 19).
 */
import { readdirSync, readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100; // USER_HZ: 100 on every Linux the stack runs on

type Sample = Map<string, { part: string; ticks: number }>; // pid → its part and CPU ticks so far

function partOf(pid: string, ppid: string, comm: string, cmdline: string): string | undefined {
  if (comm === 'postgres' || cmdline.startsWith('postgres:')) return 'postgres';
  if (comm === 'java' && cmdline.includes('kafka')) return 'kafka';
  // Only this benchmark's own services: its children.
  for (const service of ['control', 'data', 'intelligence']) {
    if (ppid === String(process.pid) && cmdline.includes(`/services/${service}/`)) return service;
  }
  if (pid === String(process.pid)) return 'benchmark';
  return undefined;
}

function sample(): Sample | undefined {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return undefined; // not Linux
  }
  const processes: Sample = new Map();
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const part = partOf(pid, fields[1] ?? '', comm, cmdline);
      if (!part) continue;
      // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command
      const ticks = Number(fields[11]) + Number(fields[12]);
      processes.set(pid, { part, ticks });
    } catch {
      // the process ended between the listing and the read
    }
  }
  return processes;
}

/** Starts measuring; `stop()` answers CPU milliseconds per part (and in all) over the interval. */
export function cpuMeter() {
  const before = sample();
  const started = performance.now();
  return {
    stop(): { parts: Map<string, number>; total: number; seconds: number } | undefined {
      const after = sample();
      if (!before || !after) return undefined;
      const parts = new Map<string, number>();
      let total = 0;
      // Per process: one that began during the interval counts whole; one that ended is lost
      // (under steady load the pools keep their connections, so none do).
      for (const [pid, { part, ticks }] of after) {
        const ms = ((ticks - (before.get(pid)?.ticks ?? 0)) * 1000) / TICKS_PER_SECOND;
        parts.set(part, (parts.get(part) ?? 0) + ms);
        total += ms;
      }
      return { parts, total, seconds: (performance.now() - started) / 1000 };
    },
  };
}
