import { Counter, Gauge, type Registry } from 'prom-client';

/**
 * The retention metrics (docs/adr/0072, 0073), one definition for every service that prunes: the
 * same name must mean the same thing in data and in intelligence.
 */
export function historyMetrics(registry: Registry) {
  return {
    pruned: new Counter({
      name: 'onto_history_pruned_total',
      help: 'history rows removed by retention (docs/adr/0072), by world and table',
      labelNames: ['world', 'service', 'table'] as const,
      registers: [registry],
    }),
    rows: new Gauge({
      name: 'onto_history_rows',
      help: 'history rows of a world whose history is pruned, counted at the end of each pruning pass (the instance that ran it sets it)',
      labelNames: ['world', 'service'] as const,
      registers: [registry],
    }),
  };
}
