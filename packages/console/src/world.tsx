import { useEffect, useState } from 'preact/hooks';
import { enc, get, may, send } from './api.js';
import { Merges } from './merge.js';
import { Action, ProblemView, Section, statusClass, useLoad, Value } from './ui.js';

interface PropertyDef {
  type: string;
  indexed?: boolean;
}
interface Schema {
  version: number;
  objectTypes: Record<string, { primaryKey: string; properties: Record<string, PropertyDef> }>;
  linkTypes: Record<string, { from: string; to: string; cardinality: string }>;
  actionTypes?: Record<string, unknown>;
}
interface DataObject {
  type: string;
  pk: string;
  version: number;
  properties: Record<string, unknown>;
}

const TABS = ['objects', 'diff', 'merges', 'schema', 'tags', 'intelligence', 'consistency'] as const;
const useSchema = (world: string) => useLoad(() => get<Schema>('control', `/v1/worlds/${enc(world)}/schema`), [world]);

/** A record as a two-column table; anything else as JSON. */
function KeyValues({ value }: { value: unknown }) {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return <Value value={value} />;
  return (
    <table>
      <tbody>
        {Object.entries(value).map(([k, v]) => (
          <tr key={k}>
            <th scope="row">{k}</th>
            <td>
              <Value value={v} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Objects({ world }: { world: string }) {
  const schema = useSchema(world);
  const types = Object.keys(schema.data?.objectTypes ?? {});
  const [type, setType] = useState('');
  const [filter, setFilter] = useState('');
  const [sort, setSort] = useState('');
  const [cursors, setCursors] = useState<string[]>([]);
  const current = type || types[0] || '';
  const query = new URLSearchParams({ limit: '20' });
  if (filter) query.set('filter', filter);
  if (sort) query.set('sort', sort);
  const cursor = cursors.at(-1);
  if (cursor) query.set('cursor', cursor);
  const page = useLoad(
    async () =>
      current
        ? get<{ objects: DataObject[]; next: string | null }>(
            'data',
            `/v1/worlds/${enc(world)}/objects/${enc(current)}?${query}`,
          )
        : undefined,
    [world, current, filter, sort, cursor],
  );
  const def = schema.data?.objectTypes[current];
  const indexed = Object.entries(def?.properties ?? {})
    .filter(([, p]) => p.indexed)
    .map(([n]) => n);
  const columns = Object.keys(def?.properties ?? {});
  return (
    <Section title="Objects">
      <ProblemView error={schema.error} />
      <form class="row" onSubmit={(e) => e.preventDefault()}>
        <label>
          Type
          <select
            value={current}
            onChange={(e) => {
              setType(e.currentTarget.value);
              setCursors([]);
            }}
          >
            {types.map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
        </label>
        <label>
          Filter (indexed: {indexed.join(', ') || 'none'}; e.g. amount:gte:100)
          <input
            value={filter}
            onChange={(e) => {
              setFilter(e.currentTarget.value);
              setCursors([]);
            }}
          />
        </label>
        <label>
          Sort (e.g. -amount)
          <input
            value={sort}
            onChange={(e) => {
              setSort(e.currentTarget.value);
              setCursors([]);
            }}
          />
        </label>
      </form>
      <ProblemView error={page.error} />
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">Key</th>
              {columns.map((c) => (
                <th key={c} scope="col">
                  {c}
                </th>
              ))}
              <th scope="col">Version</th>
            </tr>
          </thead>
          <tbody>
            {(page.data?.objects ?? []).map((o) => (
              <tr key={o.pk}>
                <td>
                  <a href={`#/w/${enc(world)}/object/${enc(o.type)}/${enc(o.pk)}`}>{o.pk}</a>
                </td>
                {columns.map((c) => (
                  <td key={c}>
                    <Value value={o.properties[c]} />
                  </td>
                ))}
                <td>{o.version}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <div class="row">
        {cursors.length > 0 ? (
          <button type="button" onClick={() => setCursors(cursors.slice(0, -1))}>
            Previous page
          </button>
        ) : null}
        {page.data?.next ? (
          <button type="button" onClick={() => setCursors([...cursors, page.data?.next as string])}>
            Next page
          </button>
        ) : null}
      </div>
    </Section>
  );
}

/** One object: its properties (editable), links, derived values, and the object at any commit. */
function ObjectPage({ world, type, pk }: { world: string; type: string; pk: string }) {
  const schema = useSchema(world);
  const vector = useLoad(
    () => get<{ data: { dataSeq: number | null } }>('control', `/v1/worlds/${enc(world)}/consistency`),
    [world],
  );
  const [at, setAt] = useState('');
  const path = `/v1/worlds/${enc(world)}/objects/${enc(type)}/${enc(pk)}`;
  const object = useLoad(() => get<DataObject>('data', at ? `${path}?at=${enc(at)}` : path), [path, at]);
  const derived = useLoad(() => get<unknown>('intelligence', `${path}/derived`), [path]);
  const [edits, setEdits] = useState<Record<string, string>>({});
  const [editError, setEditError] = useState<unknown>(undefined);
  const linkTypes = Object.entries(schema.data?.linkTypes ?? {}).filter(([, l]) => l.from === type);
  const latest = vector.data?.data.dataSeq ?? 0;
  const props = object.data?.properties ?? {};
  const names = [...new Set([...Object.keys(schema.data?.objectTypes[type]?.properties ?? {}), ...Object.keys(props)])];
  const save = async () => {
    const changed: Record<string, unknown> = {};
    for (const [name, text] of Object.entries(edits)) {
      try {
        changed[name] = JSON.parse(text);
      } catch {
        setEditError(new Error(`${name}: not JSON (quote strings, e.g. "gold")`));
        return;
      }
    }
    setEditError(undefined);
    await send('data', 'PATCH', path, { properties: changed }, { 'if-match': `"${object.data?.version}"` });
    setEdits({});
    await object.reload();
  };
  const writable = may(world, 'editor') && !at;
  return (
    <>
      <Section title={`${type} ${pk}`}>
        <label>
          Read at commit {at || 'now'}
          <input
            type="range"
            min={0}
            max={latest}
            value={at || String(latest)}
            onChange={(e) => setAt(e.currentTarget.value === String(latest) ? '' : e.currentTarget.value)}
            aria-valuetext={at ? `commit ${at}` : 'now'}
          />
        </label>
        <ProblemView error={object.error} />
        {object.data ? <p>Version {object.data.version}</p> : null}
        <table>
          <tbody>
            {names.map((name) => (
              <tr key={name}>
                <th scope="row">{name}</th>
                <td>
                  {writable ? (
                    <input
                      aria-label={name}
                      data-testid={`prop-${name}`}
                      value={edits[name] ?? JSON.stringify(props[name] ?? null)}
                      onInput={(e) => setEdits({ ...edits, [name]: e.currentTarget.value })}
                    />
                  ) : (
                    <Value value={props[name]} />
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        <ProblemView error={editError} />
        {writable ? <Action label="Save" kind="primary" run={save} testid="save-object" /> : null}
      </Section>
      <Section title="Derived values">
        <ProblemView error={derived.error} />
        <KeyValues value={derived.data} />
      </Section>
      <Section title="Links">
        {linkTypes.map(([name]) => (
          <Links key={name} world={world} path={`${path}/links/${enc(name)}`} name={name} at={at} />
        ))}
      </Section>
    </>
  );
}

function Links(props: { world: string; path: string; name: string; at: string }) {
  const links = useLoad(
    () => get<{ objects?: DataObject[] }>('data', props.at ? `${props.path}?at=${enc(props.at)}` : props.path),
    [props.path, props.at],
  );
  return (
    <div>
      <h3>{props.name}</h3>
      <ProblemView error={links.error} />
      <ul>
        {(links.data?.objects ?? []).map((o) => (
          <li key={o.pk}>
            <a href={`#/w/${enc(props.world)}/object/${enc(o.type)}/${enc(o.pk)}`}>
              {o.type} {o.pk}
            </a>
          </li>
        ))}
      </ul>
    </div>
  );
}

interface Diff {
  objects: Array<{
    type: string;
    pk: string;
    change: string;
    side: string;
    properties: Record<string, { old: unknown; new: unknown }>;
  }>;
  links: Array<{ linkType: string; fromPk: string; toPk: string; change: string }>;
  next?: string | null;
}

function DiffView({ world }: { world: string }) {
  const worlds = useLoad(() => get<{ worlds: Array<{ id: string }> }>('control', '/v1/worlds'), []);
  const [against, setAgainst] = useState('');
  const diff = useLoad(
    async () => (against ? get<Diff>('data', `/v1/worlds/${enc(world)}/diff?against=${enc(against)}`) : undefined),
    [world, against],
  );
  return (
    <Section title={`Diff of ${world}`}>
      <label>
        Against world
        <select value={against} onChange={(e) => setAgainst(e.currentTarget.value)} data-testid="diff-against">
          <option value="">— pick a world —</option>
          {(worlds.data?.worlds ?? [])
            .filter((w) => w.id !== world)
            .map((w) => (
              <option key={w.id}>{w.id}</option>
            ))}
        </select>
      </label>
      <ProblemView error={diff.error ?? worlds.error} />
      {diff.data ? (
        <table data-testid="diff">
          <thead>
            <tr>
              <th scope="col">Object</th>
              <th scope="col">Change</th>
              <th scope="col">Changed in</th>
              <th scope="col">
                Properties ({against} → {world})
              </th>
            </tr>
          </thead>
          <tbody>
            {diff.data.objects.map((o) => (
              <tr key={`${o.type}/${o.pk}`}>
                <td>
                  {o.type} {o.pk}
                </td>
                <td>{o.change}</td>
                <td>{o.side === 'to' ? world : o.side === 'from' ? against : 'both'}</td>
                <td>
                  {Object.entries(o.properties).map(([name, p]) => (
                    <div key={name}>
                      {name}: <Value value={p.old} /> → <Value value={p.new} />
                    </div>
                  ))}
                </td>
              </tr>
            ))}
            {diff.data.links.map((l) => (
              <tr key={`${l.linkType}/${l.fromPk}/${l.toPk}`}>
                <td>
                  link {l.linkType} {l.fromPk} → {l.toPk}
                </td>
                <td>{l.change}</td>
                <td />
                <td />
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </Section>
  );
}

function SchemaView({ world }: { world: string }) {
  const schema = useSchema(world);
  const history = useLoad(
    () => get<{ versions?: unknown[] }>('control', `/v1/worlds/${enc(world)}/schema/history`),
    [world],
  );
  return (
    <>
      <Section title={`Schema (version ${schema.data?.version ?? '…'})`}>
        <ProblemView error={schema.error} />
        {(['objectTypes', 'linkTypes', 'actionTypes'] as const).map((kind) => (
          <div key={kind}>
            <h3>{kind}</h3>
            {Object.entries(schema.data?.[kind] ?? {}).map(([name, def]) => (
              <details key={name}>
                <summary>{name}</summary>
                <pre>{JSON.stringify(def, null, 2)}</pre>
              </details>
            ))}
          </div>
        ))}
      </Section>
      <Section title="History">
        <ProblemView error={history.error} />
        {(history.data?.versions ?? []).map((v, i) => (
          <details key={String(i)}>
            <summary>Version {String((v as { version?: number }).version ?? i)}</summary>
            <pre>{JSON.stringify(v, null, 2)}</pre>
          </details>
        ))}
      </Section>
    </>
  );
}

function Tags({ world }: { world: string }) {
  const tags = useLoad(
    () =>
      get<{ tags: Array<{ name: string; status: string; ref: unknown }> }>('control', `/v1/worlds/${enc(world)}/tags`),
    [world],
  );
  const [name, setName] = useState('');
  return (
    <Section title="Tags">
      <ProblemView error={tags.error} />
      <table>
        <thead>
          <tr>
            <th scope="col">Tag</th>
            <th scope="col">Status</th>
            <th scope="col">Ref</th>
          </tr>
        </thead>
        <tbody>
          {(tags.data?.tags ?? []).map((t) => (
            <tr key={t.name}>
              <td>{t.name}</td>
              <td>
                <span class={statusClass(t.status)}>{t.status}</span>
              </td>
              <td>
                <Value value={t.ref} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {may(world, 'editor') ? (
        <form class="row" onSubmit={(e) => e.preventDefault()}>
          <label>
            New tag
            <input value={name} onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <Action
            label="Tag"
            run={async () => {
              await send('control', 'PUT', `/v1/worlds/${enc(world)}/tags/${enc(name)}`, {});
              await tags.reload();
            }}
          />
        </form>
      ) : null}
    </Section>
  );
}

interface Decision {
  id: string;
  rule: string;
  actionType: string;
  objectType: string;
  pk: string;
  status: string;
}

function Intelligence({ world }: { world: string }) {
  const base = `/v1/worlds/${enc(world)}`;
  const decisions = useLoad(() => get<{ decisions: Decision[] }>('intelligence', `${base}/decisions`), [world]);
  const alerts = useLoad(
    () =>
      get<{ alerts: Array<{ id: string; rule: string; pk: string; status: string; severity?: string }> }>(
        'intelligence',
        `${base}/alerts`,
      ),
    [world],
  );
  const rules = useLoad(
    () =>
      get<{ rules?: Array<{ name: string; condition: string; objectType: string }> }>('intelligence', `${base}/rules`),
    [world],
  );
  const canWrite = may(world, 'editor');
  return (
    <>
      <Section title="Decisions">
        <ProblemView error={decisions.error} />
        <table>
          <thead>
            <tr>
              <th scope="col">Decision</th>
              <th scope="col">Rule</th>
              <th scope="col">Action</th>
              <th scope="col">Object</th>
              <th scope="col">Status</th>
              <th scope="col">
                <span class="visually-hidden">Approve or reject</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {(decisions.data?.decisions ?? []).map((d) => (
              <tr key={d.id} data-testid={`decision-${d.id}`}>
                <td>{d.id.slice(0, 8)}</td>
                <td>{d.rule}</td>
                <td>{d.actionType}</td>
                <td>
                  {d.objectType} {d.pk}
                </td>
                <td>
                  <span class={statusClass(d.status)}>{d.status}</span>
                </td>
                <td>
                  {canWrite && d.status === 'PENDING_APPROVAL' ? (
                    <>
                      <Action
                        label="Approve"
                        kind="primary"
                        testid={`approve-${d.id}`}
                        run={async () => {
                          await send('intelligence', 'POST', `${base}/decisions/${enc(d.id)}/approve`, {});
                          await decisions.reload();
                        }}
                      />
                      <Action
                        label="Reject"
                        run={async () => {
                          await send('intelligence', 'POST', `${base}/decisions/${enc(d.id)}/reject`, {});
                          await decisions.reload();
                        }}
                      />
                    </>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        <Action label="Refresh" run={decisions.reload} />
      </Section>
      <Section title="Alerts">
        <ProblemView error={alerts.error} />
        <ul>
          {(alerts.data?.alerts ?? []).map((a) => (
            <li key={a.id}>
              <span class={statusClass(a.status)}>{a.status}</span> {a.rule} on {a.pk}
              {a.severity ? ` (${a.severity})` : ''}
            </li>
          ))}
        </ul>
      </Section>
      <Section title="Rules">
        <ProblemView error={rules.error} />
        <ul>
          {(rules.data?.rules ?? []).map((r) => (
            <li key={r.name}>
              <strong>{r.name}</strong> on {r.objectType}: <code>{r.condition}</code>
            </li>
          ))}
        </ul>
      </Section>
    </>
  );
}

interface Position {
  schemaVersion: number;
  dataSeq: number | null;
  reportedAt: string | null;
}
interface Vector {
  control: Position;
  data: Position;
  intelligence: Position;
  spread: number;
  dataBehind: number;
  consistent: boolean;
  lagging: string | null;
  findings: Array<{ kind: string; subject: string; detail: unknown; foundAt: string }>;
}

/** The version vector, polled every 2 s, the laggard highlighted. */
function Consistency({ world }: { world: string }) {
  const vector = useLoad(() => get<Vector>('control', `/v1/worlds/${enc(world)}/consistency`), [world]);
  useEffect(() => {
    const timer = setInterval(() => void vector.reload(), 2000);
    return () => clearInterval(timer);
  }, [vector.reload]);
  const v = vector.data;
  return (
    <Section title="Consistency">
      <ProblemView error={vector.error} />
      {v ? (
        <>
          <p data-testid="consistent">
            {v.consistent ? 'Consistent' : 'Not consistent'} · schema spread {v.spread} · intelligence {v.dataBehind}{' '}
            writes behind data
            {v.lagging ? ` · lagging: ${v.lagging}` : ''}
          </p>
          <table>
            <thead>
              <tr>
                <th scope="col">Service</th>
                <th scope="col">Schema version</th>
                <th scope="col">Data position</th>
                <th scope="col">Reported</th>
              </tr>
            </thead>
            <tbody>
              {(['control', 'data', 'intelligence'] as const).map((s) => (
                <tr key={s} class={v.lagging === s ? 'laggard' : ''} data-testid={`vector-${s}`}>
                  <th scope="row">
                    {s}
                    {v.lagging === s ? ' (lagging)' : ''}
                  </th>
                  <td>{v[s].schemaVersion}</td>
                  <td>{v[s].dataSeq ?? '—'}</td>
                  <td>{v[s].reportedAt ? new Date(v[s].reportedAt as string).toLocaleTimeString() : 'never'}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <h3>Checker findings</h3>
          {v.findings.length === 0 ? <p>None in the last run.</p> : null}
          <ul>
            {v.findings.map((f) => (
              <li key={`${f.kind}/${f.subject}`}>
                <strong>{f.kind}</strong> {f.subject}: <Value value={f.detail} />
              </li>
            ))}
          </ul>
        </>
      ) : null}
    </Section>
  );
}

export function WorldPage({ world, tab, rest }: { world: string; tab: string; rest: string[] }) {
  const info = useLoad(() => get<{ status: string }>('control', `/v1/worlds/${enc(world)}`), [world]);
  return (
    <main>
      <h1>
        {world} {info.data ? <span class={statusClass(info.data.status)}>{info.data.status}</span> : null}
      </h1>
      <ProblemView error={info.error} />
      <nav class="tabs" aria-label="World">
        {TABS.map((t) => (
          <a key={t} href={`#/w/${enc(world)}/${t}`} aria-current={t === tab ? 'page' : undefined}>
            {t}
          </a>
        ))}
      </nav>
      {tab === 'objects' ? <Objects world={world} /> : null}
      {tab === 'object' && rest[0] && rest[1] ? <ObjectPage world={world} type={rest[0]} pk={rest[1]} /> : null}
      {tab === 'diff' ? <DiffView world={world} /> : null}
      {tab === 'merges' ? <Merges world={world} selected={rest[0]} /> : null}
      {tab === 'schema' ? <SchemaView world={world} /> : null}
      {tab === 'tags' ? <Tags world={world} /> : null}
      {tab === 'intelligence' ? <Intelligence world={world} /> : null}
      {tab === 'consistency' ? <Consistency world={world} /> : null}
    </main>
  );
}
