import { useEffect, useState } from 'preact/hooks';
import { enc, get, may, send, userId } from './api.js';
import { Action, ProblemView, Section, statusClass, useLoad, Value, WorldSelect } from './ui.js';
import type { World } from './worlds.js';

interface Conflict {
  id: string;
  type: string;
  entity: Record<string, unknown>;
  base: unknown;
  source: unknown;
  target: unknown;
  reason: string | null;
  needsPerson: boolean;
  resolution: { take: string | null; value?: unknown; by: string } | null;
}
interface Merge {
  id: string;
  source: string;
  target: string;
  strategy: string;
  dryRun: boolean;
  status: string;
  phase?: string;
  counts: { conflicts: number; unresolved: number };
  failure: { service: string; phase: string; reason: string } | null;
  result: { dataSeq: number | null } | null;
  conflicts?: Conflict[];
  createdAt: string;
  actor?: string;
  round?: number;
  sentBack?: { round: number; reason: string; at: string } | null;
  proposal?: Proposal;
}
interface CheckResult {
  rule: string;
  fired: { type: string; pk: string }[];
  firedCount: number;
  errors: string[];
}
/** A merge into a protected world: its approvals and required checks (docs/adr/0085). */
interface Proposal {
  requiredApprovals: number;
  approvals: { by: string; at: string }[];
  requiredChecks: string[];
  checks: { state: string; ranAt: string | null; results: CheckResult[] } | null;
}

const STRATEGIES = ['MANUAL', 'SOURCE_WINS', 'TARGET_WINS', 'TIMESTAMP_WINS'];
const FINAL = new Set(['MERGED', 'FAILED', 'COMPENSATED', 'CONFLICTS']);
/** A proposal waits for people, and its checks and a new plan arrive in the background: polled slowly. */
const WAITING = new Set(['PROPOSED']);
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A conflict's sides property by property when they are whole objects (or types), else one row
 * named after the entity's property.
 */
function rows(c: Conflict): Array<{ name: string; base: unknown; source: unknown; target: unknown }> {
  const sides = [c.base, c.source, c.target];
  if (sides.every((s) => s === null || s === undefined || isRecord(s)) && sides.some(isRecord)) {
    const names = new Set(sides.flatMap((s) => (isRecord(s) ? Object.keys(s) : [])));
    const at = (s: unknown, n: string) => (isRecord(s) ? s[n] : undefined);
    return [...names]
      .sort()
      .map((name) => ({ name, base: at(c.base, name), source: at(c.source, name), target: at(c.target, name) }));
  }
  const name = typeof c.entity.property === 'string' ? c.entity.property : 'value';
  return [{ name, base: c.base, source: c.source, target: c.target }];
}

/** `Order o-1.amount`, `link orders c-1 → o-1`, or the entity's fields as they come. */
function entityName(e: Record<string, unknown>): string {
  const text = (v: unknown) => (typeof v === 'string' || typeof v === 'number' ? String(v) : '');
  if (e.type !== undefined && e.pk !== undefined)
    return `${text(e.type)} ${text(e.pk)}${e.property ? `.${text(e.property)}` : ''}`;
  return Object.values(e).map(text).filter(Boolean).join(' ');
}

function ConflictCard(props: {
  world: string;
  merge: Merge;
  conflict: Conflict;
  canWrite: boolean;
  onChange: () => Promise<unknown>;
}) {
  const { conflict: c } = props;
  const [value, setValue] = useState(JSON.stringify(c.target ?? null));
  const [error, setError] = useState<unknown>(undefined);
  const resolve = async (body: Record<string, unknown>) => {
    await send(
      'control',
      'PUT',
      `/v1/worlds/${enc(props.world)}/merges/${enc(props.merge.id)}/conflicts/${enc(c.id)}`,
      body,
    );
    await props.onChange();
  };
  const open = props.merge.status === 'CONFLICTS' && c.resolution === null;
  return (
    <article class="conflict" data-testid={`conflict-${c.id}`} aria-label={`Conflict ${c.id}`}>
      <h3>
        {c.id} <span class="badge">{c.type}</span> {entityName(c.entity)}
        {c.needsPerson ? <span class="badge badge-failed">needs a person</span> : null}
      </h3>
      {c.reason ? <p>{c.reason}</p> : null}
      <table class="sides">
        <thead>
          <tr>
            <th scope="col">Property</th>
            <th scope="col">Base</th>
            <th scope="col">Source ({props.merge.source})</th>
            <th scope="col">Target ({props.merge.target})</th>
          </tr>
        </thead>
        <tbody>
          {rows(c).map((r) => (
            <tr key={r.name}>
              <th scope="row">{r.name}</th>
              <td>
                <Value value={r.base} />
              </td>
              <td class={JSON.stringify(r.source) !== JSON.stringify(r.base) ? 'changed' : ''}>
                <Value value={r.source} />
              </td>
              <td class={JSON.stringify(r.target) !== JSON.stringify(r.base) ? 'changed' : ''}>
                <Value value={r.target} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {c.resolution ? (
        <p class="resolved">
          Resolved: {c.resolution.take ?? 'tie'}
          {c.resolution.take === 'value' ? (
            <>
              {' '}
              = <Value value={c.resolution.value} />
            </>
          ) : null}{' '}
          by {c.resolution.by}
        </p>
      ) : null}
      {open && props.canWrite ? (
        <div class="row">
          <Action label="Take source" run={() => resolve({ take: 'source' })} testid={`take-source-${c.id}`} />
          <Action label="Take target" run={() => resolve({ take: 'target' })} testid={`take-target-${c.id}`} />
          <label>
            Value (JSON)
            <input
              value={value}
              onInput={(e) => setValue(e.currentTarget.value)}
              data-testid={`value-${c.id}`}
              aria-invalid={error ? 'true' : 'false'}
            />
          </label>
          <Action
            label="Use value"
            testid={`take-value-${c.id}`}
            run={async () => {
              let parsed: unknown;
              try {
                parsed = JSON.parse(value);
                setError(undefined);
              } catch {
                setError(new Error('the value is not JSON: quote strings, e.g. "gold"'));
                return;
              }
              await resolve({ take: 'value', value: parsed });
            }}
          />
          <ProblemView error={error} />
        </div>
      ) : null}
    </article>
  );
}

/** What a required check found: nothing (it passes), the objects it fired on, or why it could not run. */
function firedOn(r: CheckResult): string {
  if (r.firedCount === 0 && r.errors.length === 0) return 'nothing: passes';
  const more = r.firedCount > r.fired.length ? [`… ${r.firedCount} in all`] : [];
  return [...r.fired.map((o) => `${o.type} ${o.pk}`), ...more, ...r.errors].join(', ');
}

/** A proposal's approvals, its required checks with the objects each rule fired on, and why it was planned again. */
function ProposalView(props: { world: string; merge: Merge; proposal: Proposal; onChange: () => Promise<unknown> }) {
  const { merge: m, proposal: p } = props;
  const waiting = m.status === 'PROPOSED' && m.phase === 'proposed';
  const me = userId();
  const mayApprove = waiting && may(props.world, 'owner') && me !== m.actor && !p.approvals.some((a) => a.by === me);
  return (
    <section class="proposal" aria-label="Proposal" data-testid="proposal">
      <h3>
        Approvals {p.approvals.length} of {p.requiredApprovals}
        {m.status === 'PROPOSED' && m.phase === 'planning' ? ' · being planned again' : ''}
      </h3>
      {m.sentBack ? (
        <p data-testid="sent-back">
          Sent back for a new plan (round {m.sentBack.round}): {m.sentBack.reason}. Approvals of the earlier plan no
          longer count.
        </p>
      ) : null}
      {p.approvals.length > 0 ? (
        <ul data-testid="approvals">
          {p.approvals.map((a) => (
            <li key={a.by}>
              {a.by} · {new Date(a.at).toLocaleString()}
            </li>
          ))}
        </ul>
      ) : null}
      {p.requiredChecks.length > 0 ? (
        <div data-testid="checks" data-state={p.checks?.state ?? 'none'}>
          <h3>
            Checks <span class={statusClass(p.checks?.state ?? 'pending')}>{p.checks?.state ?? 'not run'}</span>
          </h3>
          <table>
            <thead>
              <tr>
                <th scope="col">Rule</th>
                <th scope="col">Fired on</th>
              </tr>
            </thead>
            <tbody>
              {p.requiredChecks.map((rule) => {
                const r = p.checks?.results.find((x) => x.rule === rule);
                return (
                  <tr key={rule} data-testid={`check-${rule}`}>
                    <th scope="row">{rule}</th>
                    <td>{r ? firedOn(r) : 'running'}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      {mayApprove ? (
        <Action
          label="Approve"
          kind="primary"
          testid="approve-merge"
          run={async () => {
            await send('control', 'POST', `/v1/worlds/${enc(props.world)}/merges/${enc(m.id)}/approve`);
            await props.onChange();
          }}
        />
      ) : null}
    </section>
  );
}

function MergeView(props: { world: string; id: string; onChange: () => Promise<unknown> }) {
  const merge = useLoad(
    () => get<Merge>('control', `/v1/worlds/${enc(props.world)}/merges/${enc(props.id)}?conflictLimit=200`),
    [props.world, props.id],
  );
  const m = merge.data;
  const reloadAll = async () => {
    await merge.reload();
    await props.onChange();
  };
  // A merge still RUNNING is polled until it reaches CONFLICTS or an end; a proposal more slowly.
  useEffect(() => {
    if (!m || FINAL.has(m.status)) return;
    const timer = setTimeout(() => void merge.reload(), WAITING.has(m.status) ? 2000 : 500);
    return () => clearTimeout(timer);
  }, [m, merge.reload]);
  // The history shows the merge's status too: refresh it whenever the status moves.
  const status = m?.status;
  useEffect(() => {
    if (status) void props.onChange();
  }, [status, props.onChange]);
  if (!m) return <ProblemView error={merge.error} />;
  const canWrite = may(props.world, 'owner');
  return (
    <section aria-label={`Merge ${m.id}`} data-testid="merge-view" data-status={m.status}>
      <h2>
        Merge {m.source} → {m.target} <span class={statusClass(m.status)}>{m.status}</span>
      </h2>
      <p>
        {m.strategy}
        {m.dryRun ? ' (dry run: nothing applied)' : ''} · {m.counts.conflicts} conflicts, {m.counts.unresolved}{' '}
        unresolved
        {m.result?.dataSeq ? ` · merge commit ${m.result.dataSeq}` : ''}
      </p>
      {m.failure ? (
        <div class="problem" role="alert">
          {m.failure.service} failed in {m.failure.phase}: {m.failure.reason}
        </div>
      ) : null}
      <ProblemView error={merge.error} />
      {m.proposal && (m.proposal.requiredApprovals > 0 || m.proposal.requiredChecks.length > 0) && !m.dryRun ? (
        <ProposalView world={props.world} merge={m} proposal={m.proposal} onChange={reloadAll} />
      ) : null}
      {(m.conflicts ?? []).map((c) => (
        <ConflictCard
          key={c.id}
          world={props.world}
          merge={m}
          conflict={c}
          canWrite={canWrite}
          onChange={merge.reload}
        />
      ))}
      {m.status === 'CONFLICTS' && !m.dryRun && canWrite ? (
        <Action
          label="Apply merge"
          kind="primary"
          testid="apply-merge"
          run={async () => {
            await send('control', 'POST', `/v1/worlds/${enc(props.world)}/merges/${enc(m.id)}/apply`);
            await reloadAll();
          }}
        />
      ) : null}
    </section>
  );
}

/** Merges into `world`: start one (dry run first), resolve its conflicts, apply; the history. */
export function Merges({ world, selected }: { world: string; selected?: string | undefined }) {
  const worlds = useLoad(() => get<{ worlds: World[] }>('control', '/v1/worlds'), []);
  const history = useLoad(
    () => get<{ merges: Merge[] }>('control', `/v1/worlds/${enc(world)}/merges?limit=50`),
    [world],
  );
  const [source, setSource] = useState('');
  const [strategy, setStrategy] = useState('MANUAL');
  const [dryRun, setDryRun] = useState(true);
  const others = (worlds.data?.worlds ?? []).filter((w) => w.id !== world);
  const start = async () => {
    const body = { source: source || others[0]?.id, strategy, dryRun };
    const started = await send<{ id: string }>('control', 'POST', `/v1/worlds/${enc(world)}/merges`, body);
    location.hash = `#/w/${enc(world)}/merges/${enc(started.id)}`;
    await history.reload();
  };
  return (
    <>
      {may(world, 'owner') ? (
        <Section title={`Merge into ${world}`}>
          <form class="row" onSubmit={(e) => e.preventDefault()}>
            <WorldSelect label="Source world" worlds={others} value={source} onChange={setSource} name="source" />
            <label>
              Strategy
              <select value={strategy} onChange={(e) => setStrategy(e.currentTarget.value)} name="strategy">
                {STRATEGIES.map((s) => (
                  <option key={s}>{s}</option>
                ))}
              </select>
            </label>
            <label class="check">
              <input
                type="checkbox"
                checked={dryRun}
                onChange={(e) => setDryRun(e.currentTarget.checked)}
                name="dryRun"
              />
              Dry run
            </label>
            <Action label="Start merge" kind="primary" run={start} testid="start-merge" />
          </form>
          <ProblemView error={worlds.error} />
        </Section>
      ) : null}
      {selected ? <MergeView key={selected} world={world} id={selected} onChange={history.reload} /> : null}
      <Section title="Merge history">
        <ProblemView error={history.error} />
        <table>
          <thead>
            <tr>
              <th scope="col">Merge</th>
              <th scope="col">Source</th>
              <th scope="col">Strategy</th>
              <th scope="col">Status</th>
              <th scope="col">Conflicts</th>
              <th scope="col">At</th>
            </tr>
          </thead>
          <tbody>
            {(history.data?.merges ?? []).map((m) => (
              <tr key={m.id}>
                <td>
                  <a href={`#/w/${enc(world)}/merges/${enc(m.id)}`}>{m.id.slice(-8)}</a>
                </td>
                <td>{m.source}</td>
                <td>
                  {m.strategy}
                  {m.dryRun ? ' (dry run)' : ''}
                </td>
                <td>
                  <span class={statusClass(m.status)}>{m.status}</span>
                  {m.sentBack ? <span title={m.sentBack.reason}> (planned again)</span> : null}
                </td>
                <td>
                  {m.counts.conflicts} ({m.counts.unresolved} open)
                </td>
                <td>{new Date(m.createdAt).toLocaleString()}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Section>
    </>
  );
}
