import { useEffect, useState } from 'preact/hooks';
import { enc, get, may, request, send } from './api.js';
import { LiveEvents, Webhooks } from './live.js';
import { Merges } from './merge.js';
import { Action, ProblemView, Section, statusClass, useLoad, Value, WorldSelect } from './ui.js';

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

const TABS = [
  'objects',
  'diff',
  'merges',
  'schema',
  'tags',
  'intelligence',
  'webhooks',
  'live',
  'consistency',
] as const;
const useSchema = (world: string) => useLoad(() => get<Schema>('control', `/v1/worlds/${enc(world)}/schema`), [world]);

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
function ObjectPage({ world, type, pk, initialAt }: { world: string; type: string; pk: string; initialAt?: string }) {
  const schema = useSchema(world);
  const vector = useLoad(
    () => get<{ data: { dataSeq: number | null } }>('control', `/v1/worlds/${enc(world)}/consistency`),
    [world],
  );
  const [at, setAt] = useState(initialAt ?? '');
  const path = `/v1/worlds/${enc(world)}/objects/${enc(type)}/${enc(pk)}`;
  const object = useLoad(() => get<DataObject>('data', at ? `${path}?at=${enc(at)}` : path), [path, at]);
  const derived = useLoad(
    () =>
      get<{
        derived: Record<
          string,
          { value: unknown; stale: boolean; computedAt: string | null; error: { message: string } | null }
        >;
      }>('intelligence', at ? `${path}/derived?at=${enc(at)}` : `${path}/derived`),
    [path, at],
  );
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
    await derived.reload();
  };
  const writable = may(world, 'editor') && !at;
  return (
    <>
      <Section title={`${type} ${pk}`}>
        {latest > 0 ? (
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
        ) : null}
        <ProblemView error={object.error} />
        {object.data ? <p>Version {object.data.version}</p> : null}
        <table>
          <tbody>
            {names.map((name) => (
              <tr key={name}>
                <th scope="row">{name}</th>
                <td>
                  {writable && name !== schema.data?.objectTypes[type]?.primaryKey ? (
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
        <table>
          <tbody>
            {Object.entries(derived.data?.derived ?? {}).map(([name, d]) => (
              <tr key={name}>
                <th scope="row">{name}</th>
                <td>
                  <Value value={d.value} />
                  {d.stale ? <span class="badge badge-pending"> stale</span> : null}
                  {d.error ? <span class="problem-inline"> {d.error.message}</span> : null}
                </td>
                <td>{d.computedAt ? `computed ${new Date(d.computedAt).toLocaleString()}` : 'not computed yet'}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {Object.keys(derived.data?.derived ?? {}).length === 0 && derived.data ? (
          <p>No derived properties on {type}.</p>
        ) : null}
      </Section>
      <Section title="Links">
        {linkTypes.map(([name]) => (
          <Links key={name} world={world} path={`${path}/links/${enc(name)}`} name={name} at={at} />
        ))}
      </Section>
      <History
        world={world}
        type={type}
        pk={pk}
        path={path}
        at={at}
        setAt={setAt}
        latest={latest}
        reloadKey={object.data?.version}
      />
    </>
  );
}

interface Version {
  version: number;
  seq: number;
  deleted: boolean;
  properties: Record<string, unknown> | null;
  actor: string;
  writtenAt: string;
  world: string;
}

/**
 * Every version of the object, newest first (its base's too, in a fork), each with what changed
 * from the one before it; "Read" moves the time slider to its commit. A version the fork inherited
 * is read in the world that wrote it (a fork has no commits before its fork point).
 */
function History(props: {
  world: string;
  type: string;
  pk: string;
  path: string;
  at: string;
  setAt: (at: string) => void;
  latest: number;
  reloadKey: number | undefined;
}) {
  const [pages, setPages] = useState<{ versions: Version[]; next: string | null }>({ versions: [], next: null });
  const [error, setError] = useState<unknown>(undefined);
  const load = async (cursor: string | null) => {
    try {
      const page = await get<{ versions: Version[]; next: string | null }>(
        'data',
        `${props.path}/history?limit=20${cursor ? `&cursor=${enc(cursor)}` : ''}`,
      );
      setPages((prev) => ({
        versions: cursor ? [...prev.versions, ...page.versions] : page.versions,
        next: page.next,
      }));
      setError(undefined);
    } catch (err) {
      setError(err);
    }
  };
  useEffect(() => {
    void load(null);
  }, [props.path, props.reloadKey]);
  const { versions } = pages;
  return (
    <Section title="History">
      <ProblemView error={error} />
      <table data-testid="object-history">
        <thead>
          <tr>
            <th scope="col">Version</th>
            <th scope="col">Commit</th>
            <th scope="col">Written</th>
            <th scope="col">By</th>
            <th scope="col">Changed</th>
            <th scope="col">
              <span class="sr-only">Read</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {versions.map((v, i) => {
            const before = versions[i + 1];
            return (
              <tr key={v.seq} aria-current={props.at === String(v.seq) ? 'true' : undefined}>
                <td>
                  v{v.version}
                  {v.world !== props.world ? <span class="muted"> (in {v.world})</span> : null}
                </td>
                <td>{v.seq}</td>
                <td>{new Date(v.writtenAt).toLocaleString()}</td>
                <td>{v.actor}</td>
                <td>
                  {v.deleted ? (
                    <span class="badge badge-deleted">deleted</span>
                  ) : (
                    <Changes before={before && !before.deleted ? before.properties : null} after={v.properties ?? {}} />
                  )}
                </td>
                <td>
                  {v.deleted ? null : v.world !== props.world ? (
                    <a href={`#/w/${enc(v.world)}/object/${enc(props.type)}/${enc(props.pk)}/${v.seq}`}>
                      Read v{v.version} in {v.world}
                    </a>
                  ) : (
                    <button
                      type="button"
                      class="link"
                      onClick={() => props.setAt(String(v.seq) === String(props.latest) ? '' : String(v.seq))}
                    >
                      Read v{v.version}
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {pages.next ? <Action label="Older versions" run={() => load(pages.next)} /> : null}
    </Section>
  );
}

/** The properties a version set, removed or changed, against the one before it (null: it created the object). */
function Changes({ before, after }: { before: Record<string, unknown> | null; after: Record<string, unknown> }) {
  if (before === null) return <span class="muted">created</span>;
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].filter(
    (n) => JSON.stringify(before[n]) !== JSON.stringify(after[n]),
  );
  if (names.length === 0) return <span class="muted">no change</span>;
  return (
    <ul class="changes">
      {names.map((n) => (
        <li key={n}>
          <code>{n}</code>: <Value value={before[n]} /> → <Value value={after[n]} />
        </li>
      ))}
    </ul>
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
      <WorldSelect
        label="Against world"
        worlds={(worlds.data?.worlds ?? []).filter((w) => w.id !== world)}
        value={against}
        onChange={setAgainst}
        name="against"
        none="— pick a world —"
        testid="diff-against"
      />
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
    () =>
      get<{
        versions: Array<{ version: number; diff: unknown; breaking: boolean; author: string; createdAt: string }>;
      }>('control', `/v1/worlds/${enc(world)}/schema/history`),
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
        <table>
          <thead>
            <tr>
              <th scope="col">Version</th>
              <th scope="col">Author</th>
              <th scope="col">At</th>
              <th scope="col">Diff</th>
            </tr>
          </thead>
          <tbody>
            {(history.data?.versions ?? []).map((v) => (
              <tr key={v.version}>
                <td>
                  {v.version}
                  {v.breaking ? <span class="badge badge-failed">breaking</span> : null}
                </td>
                <td>{v.author}</td>
                <td>{new Date(v.createdAt).toLocaleString()}</td>
                <td>
                  <details>
                    <summary>diff</summary>
                    <pre>{JSON.stringify(v.diff, null, 2)}</pre>
                  </details>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
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
                <td>{d.id.slice(-8)}</td>
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
      <Definitions world={world} canWrite={canWrite} />
      <Actions world={world} />
    </>
  );
}

interface Definition {
  name: string;
  version: number;
  state: string;
  errors: Array<{ path: string; message: string }>;
  [field: string]: unknown;
}
const KINDS = {
  'derived-properties': 'Derived properties',
  rules: 'Rules',
  'decision-definitions': 'Decision definitions',
};
type DefinitionKind = keyof typeof KINDS;
// What a definition's body holds: its view without the bookkeeping the service adds.
const BOOKKEEPING = new Set([
  'name',
  'version',
  'state',
  'errors',
  'schemaVersion',
  'createdAt',
  'updatedAt',
  'recompute',
  'world',
]);

/** Derived properties, rules and decision definitions: listed, and edited as JSON with the API's errors in place. */
function Definitions({ world, canWrite }: { world: string; canWrite: boolean }) {
  const [kind, setKind] = useState<DefinitionKind>('rules');
  const list = useLoad(async () => {
    const answer = await get<Record<string, unknown>>('intelligence', `/v1/worlds/${enc(world)}/${kind}`);
    return (Object.values(answer).find(Array.isArray) ?? []) as Definition[];
  }, [world, kind]);
  const [name, setName] = useState('');
  const [body, setBody] = useState('{}');
  const [error, setError] = useState<unknown>(undefined);
  const edit = (d: Definition) => {
    setName(d.name);
    setBody(JSON.stringify(Object.fromEntries(Object.entries(d).filter(([k]) => !BOOKKEEPING.has(k))), null, 2));
    setError(undefined);
  };
  const save = async () => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch (err) {
      setError(new Error(`the body is not JSON: ${(err as Error).message}`));
      return;
    }
    try {
      await send('intelligence', 'PUT', `/v1/worlds/${enc(world)}/${kind}/${enc(name)}`, parsed);
      setError(undefined);
      await list.reload();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <Section title="Definitions">
      <label>
        Kind
        <select
          value={kind}
          onChange={(e) => setKind(e.currentTarget.value as DefinitionKind)}
          data-testid="definition-kind"
        >
          {Object.entries(KINDS).map(([k, label]) => (
            <option key={k} value={k}>
              {label}
            </option>
          ))}
        </select>
      </label>
      <ProblemView error={list.error} />
      <ul>
        {(list.data ?? []).map((d) => (
          <li key={d.name}>
            <button type="button" class="link" onClick={() => edit(d)}>
              {d.name}
            </button>{' '}
            v{d.version} <span class={statusClass(d.state)}>{d.state}</span>
            {d.errors.map((e) => (
              <div key={e.path} class="problem-inline">
                <code>{e.path}</code> {e.message}
              </div>
            ))}
          </li>
        ))}
      </ul>
      {canWrite ? (
        <form class="stack" onSubmit={(e) => e.preventDefault()}>
          <label>
            Name
            <input value={name} onInput={(e) => setName(e.currentTarget.value)} data-testid="definition-name" />
          </label>
          <label>
            Definition (JSON)
            <textarea
              rows={8}
              value={body}
              onInput={(e) => setBody(e.currentTarget.value)}
              data-testid="definition-body"
              aria-invalid={error ? 'true' : 'false'}
            />
          </label>
          <ProblemView error={error} />
          <button type="button" class="primary" onClick={save} data-testid="definition-save">
            Save
          </button>
        </form>
      ) : null}
    </Section>
  );
}

interface ActionSummary {
  id: string;
  actionType: string;
  status: string;
  actor: string;
  createdAt: string;
}

/** Actions, newest first; one opens with its saga steps as the API tells them. */
function Actions({ world }: { world: string }) {
  const actions = useLoad(
    () => get<{ actions: ActionSummary[] }>('intelligence', `/v1/worlds/${enc(world)}/actions`),
    [world],
  );
  const [open, setOpen] = useState<string | undefined>(undefined);
  const detail = useLoad(
    async () =>
      open ? get<ActionDetailView>('intelligence', `/v1/worlds/${enc(world)}/actions/${enc(open)}`) : undefined,
    [world, open],
  );
  return (
    <Section title="Actions">
      <ProblemView error={actions.error} />
      <table>
        <thead>
          <tr>
            <th scope="col">Action</th>
            <th scope="col">Type</th>
            <th scope="col">Status</th>
            <th scope="col">By</th>
            <th scope="col">At</th>
          </tr>
        </thead>
        <tbody>
          {(actions.data?.actions ?? []).map((a) => (
            <tr key={a.id}>
              <td>
                <button
                  type="button"
                  class="link"
                  onClick={() => setOpen(open === a.id ? undefined : a.id)}
                  aria-expanded={open === a.id}
                >
                  {a.id.slice(-8)}
                </button>
              </td>
              <td>{a.actionType}</td>
              <td>
                <span class={statusClass(a.status)}>{a.status}</span>
              </td>
              <td>{a.actor}</td>
              <td>{new Date(a.createdAt).toLocaleString()}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <ProblemView error={detail.error} />
      {open && detail.data ? <ActionDetail action={detail.data} /> : null}
    </Section>
  );
}

interface Step {
  n: number;
  command: { op: string; objectType?: string; linkType?: string; pk?: string; from?: string; to?: string };
  state: string;
  result: unknown;
  refusal: { code?: string; detail?: string } | null;
  compensation: unknown;
  compensationResult: unknown;
  compensationRefusal: { code?: string; detail?: string } | null;
}
interface ActionDetailView {
  id: string;
  actionType: string;
  status: string;
  parameters: Record<string, unknown>;
  actor: string;
  idempotencyKey: string | null;
  refusal: { code?: string; detail?: string; step?: number } | null;
  createdAt: string;
  finishedAt: string | null;
  steps: Step[];
}

/** What a command touches, as a person reads it: `modifyObject Order o-1`, `createLink placed c-1 → o-1`. */
const target = (c: Step['command']) =>
  c.linkType ? `${c.linkType} ${c.from} → ${c.to}` : `${c.objectType ?? ''} ${c.pk ?? ''}`;

/** data's answer to a step as a line per command (applied at which version, from which), the whole answer folded. */
function Answer({ result }: { result: unknown }) {
  const items = (Array.isArray(result) ? result : [result]) as Array<{
    changed?: boolean;
    version?: number;
    before?: { version?: number; deleted?: boolean } | null;
  }>;
  return (
    <details>
      <summary>
        {items
          .map(
            (r) =>
              `${r.changed === false ? 'unchanged' : 'applied'}${r.version !== undefined ? ` at v${r.version}` : ''}${
                r.before?.version !== undefined
                  ? ` (was v${r.before.version}${r.before.deleted ? ', deleted' : ''})`
                  : ''
              }`,
          )
          .join('; ')}
      </summary>
      <Value value={result} />
    </details>
  );
}

/** An action's saga: each step's command, state, data's answer, and its compensation when it was undone. */
function ActionDetail({ action }: { action: ActionDetailView }) {
  return (
    <div data-testid="action-detail">
      <h3>
        {action.actionType} <span class={statusClass(action.status)}>{action.status}</span>
      </h3>
      <p>
        Parameters <Value value={action.parameters} />
        {action.idempotencyKey ? (
          <>
            {' '}
            · Idempotency-Key <code>{action.idempotencyKey}</code>
          </>
        ) : null}
        {action.finishedAt ? ` · finished ${new Date(action.finishedAt).toLocaleString()}` : ''}
      </p>
      {action.refusal ? (
        <p class="problem-inline" role="status">
          Refused{action.refusal.step !== undefined ? ` at step ${action.refusal.step}` : ''}: {action.refusal.code}{' '}
          {action.refusal.detail}
        </p>
      ) : null}
      <table data-testid="action-steps">
        <caption>Saga steps</caption>
        <thead>
          <tr>
            <th scope="col">Step</th>
            <th scope="col">Command</th>
            <th scope="col">State</th>
            <th scope="col">Data answered</th>
            <th scope="col">Compensation</th>
          </tr>
        </thead>
        <tbody>
          {action.steps.map((s) => (
            <tr key={s.n}>
              <td>{s.n}</td>
              <td>
                <code>{s.command.op}</code> {target(s.command)}
              </td>
              <td>
                <span class={statusClass(s.state)}>{s.state}</span>
              </td>
              <td>
                {s.refusal ? (
                  <span class="problem-inline">
                    {s.refusal.code} {s.refusal.detail}
                  </span>
                ) : s.result ? (
                  <Answer result={s.result} />
                ) : (
                  <span class="muted">—</span>
                )}
              </td>
              <td>
                {s.compensationRefusal ? (
                  <span class="problem-inline">
                    {s.compensationRefusal.code} {s.compensationRefusal.detail}
                  </span>
                ) : s.compensation ? (
                  <Value value={s.compensationResult ?? s.compensation} />
                ) : (
                  <span class="muted">—</span>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
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

const HOUR = 3_600_000;
const SERVICES = ['control', 'data', 'intelligence'] as const;
const GAUGES = {
  onto_consumer_lag: 'consumer lag',
  onto_outbox_backlog: 'outbox backlog',
  onto_dlq_depth: 'DLQ depth',
};
type Gauge = keyof typeof GAUGES;

/** Each gauge summed over its series, from a service's Prometheus text (whole service, every world). */
function gauges(text: string): Record<Gauge, number> {
  const out: Record<Gauge, number> = { onto_consumer_lag: 0, onto_outbox_backlog: 0, onto_dlq_depth: 0 };
  for (const line of text.split('\n')) {
    const match = /^(onto_consumer_lag|onto_outbox_backlog|onto_dlq_depth)(?:\{[^}]*\})? (\S+)/.exec(line);
    const value = Number(match?.[2]);
    if (match && Number.isFinite(value)) out[match[1] as Gauge] += value;
  }
  return out;
}

async function pipelines(): Promise<Record<(typeof SERVICES)[number], Record<Gauge, number> | null>> {
  const texts = await Promise.all(
    SERVICES.map((s) => request(s, 'GET', '/metrics', undefined, false).catch(() => null)),
  );
  return Object.fromEntries(
    SERVICES.map((s, i) => [s, typeof texts[i] === 'string' ? gauges(texts[i] as string) : null]),
  ) as never;
}

/** A small line chart of one series over the last hour, its newest value as text beside it. */
function Sparkline({ label, points, step }: { label: string; points: Array<[number, number]>; step?: boolean }) {
  const now = Date.now();
  const max = Math.max(1, ...points.map(([, y]) => y));
  // A step chart holds each value until the next point (a position stands until the next announcement).
  const drawn = step ? points.flatMap((p, i) => (i === 0 ? [p] : [[p[0], points[i - 1]?.[1] ?? p[1]], p])) : points;
  const line = drawn
    .map(([t, y]) => `${(((t - now + HOUR) / HOUR) * 200).toFixed(1)},${(40 - (y / max) * 38).toFixed(1)}`)
    .join(' ');
  const last = points.at(-1)?.[1];
  return (
    <figure class="spark" data-points={points.length}>
      <svg viewBox="0 0 200 42" width="200" height="42" role="img" aria-label={`${label}, now ${last ?? 'unknown'}`}>
        <polyline points={line} fill="none" stroke="#0b4f9c" stroke-width="1.5" />
      </svg>
      <figcaption>
        {label}: {last ?? '—'} (max {max})
      </figcaption>
    </figure>
  );
}

/**
 * The version vector, polled every 2 s, the laggard highlighted; its last hour charted from what
 * control recorded, consumer lag since the page opened.
 */
function Consistency({ world }: { world: string }) {
  const vector = useLoad(() => get<Vector>('control', `/v1/worlds/${enc(world)}/consistency`), [world]);
  const flows = useLoad(pipelines, []);
  // The vector's last hour as control recorded it (whoever had the page open), read again every 10 s.
  const recorded = useLoad(
    () =>
      get<{ points: Array<{ at: string; spread: number; dataBehind: number }> }>(
        'control',
        `/v1/worlds/${enc(world)}/consistency/history?minutes=60`,
      ),
    [world],
  );
  // Consumer lag comes from the services' /metrics: charted since the page opened (Prometheus keeps more).
  const [lags, setLags] = useState<Array<[number, number]>>([]);
  useEffect(() => {
    let ticks = 0;
    const timer = setInterval(() => {
      void vector.reload();
      void flows.reload();
      if (++ticks % 5 === 0) void recorded.reload();
    }, 2000);
    return () => clearInterval(timer);
  }, [vector.reload, flows.reload, recorded.reload]);
  const v = vector.data;
  useEffect(() => {
    if (!flows.data) return;
    const t = Date.now();
    const lag = SERVICES.reduce((sum, s) => sum + (flows.data?.[s]?.onto_consumer_lag ?? 0), 0);
    setLags((h) => [...h.filter(([at]) => at > t - HOUR), [t, lag]]);
  }, [flows.data]);
  // The recorded points, then the vector as it stands now.
  const vectorPoints = [
    ...(recorded.data?.points ?? []).map((p) => ({ t: Date.parse(p.at), behind: p.dataBehind, spread: p.spread })),
    ...(v ? [{ t: Date.now(), behind: v.dataBehind, spread: v.spread }] : []),
  ];
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
          <div class="row">
            <Sparkline
              label="intelligence behind data (writes), last hour"
              points={vectorPoints.map((p) => [p.t, p.behind])}
              step
            />
            <Sparkline label="schema spread, last hour" points={vectorPoints.map((p) => [p.t, p.spread])} step />
            <Sparkline label="consumer lag, all services, since this page opened" points={lags} />
          </div>
          <h3>Pipelines (each service as a whole)</h3>
          <table data-testid="pipelines">
            <thead>
              <tr>
                <th scope="col">Service</th>
                {Object.values(GAUGES).map((g) => (
                  <th key={g} scope="col">
                    {g}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {SERVICES.map((s) => (
                <tr key={s}>
                  <th scope="row">{s}</th>
                  {(Object.keys(GAUGES) as Gauge[]).map((g) => (
                    <td key={g} data-testid={`gauge-${s}-${g}`}>
                      {flows.data === undefined ? '…' : flows.data[s] ? flows.data[s]?.[g] : 'not answering'}
                    </td>
                  ))}
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

interface HistoryHorizon {
  commit: number;
  movedAt: string;
}

/** The world's retention policy (control's) beside the horizon data reached with it (docs/adr/0072, 0077). */
function Retention({ world, horizon }: { world: string; horizon: HistoryHorizon | null | undefined }) {
  const policy = useLoad(
    () =>
      get<{ keepDays: number | null; keepVersions: number | null }>('control', `/v1/worlds/${enc(world)}/retention`),
    [world],
  );
  if (!policy.data) return <ProblemView error={policy.error} />;
  const { keepDays, keepVersions } = policy.data;
  return (
    <p class="retention" data-testid="retention">
      History kept:{' '}
      <span data-testid="retention-policy">
        {keepDays === null ? 'forever' : `${keepDays} day(s)`}
        {keepVersions === null ? '' : `, and the newest ${keepVersions} version(s) of each key`}
      </span>
      {' · '}horizon:{' '}
      <span data-testid="history-horizon">
        {horizon
          ? `commit ${horizon.commit} (moved ${horizon.movedAt}); older reads answer 410`
          : 'none (nothing pruned)'}
      </span>
    </p>
  );
}

export function WorldPage({ world, tab, rest }: { world: string; tab: string; rest: string[] }) {
  const info = useLoad(
    () => get<{ status: string; historyHorizon: HistoryHorizon | null }>('control', `/v1/worlds/${enc(world)}`),
    [world],
  );
  return (
    <main>
      <h1>
        {world} {info.data ? <span class={statusClass(info.data.status)}>{info.data.status}</span> : null}
      </h1>
      <ProblemView error={info.error} />
      {info.data ? <Retention world={world} horizon={info.data.historyHorizon} /> : null}
      <nav class="tabs" aria-label="World">
        {TABS.map((t) => (
          <a key={t} href={`#/w/${enc(world)}/${t}`} aria-current={t === tab ? 'page' : undefined}>
            {t}
          </a>
        ))}
      </nav>
      {tab === 'objects' ? <Objects world={world} /> : null}
      {tab === 'object' && rest[0] && rest[1] ? (
        <ObjectPage key={rest.join('/')} world={world} type={rest[0]} pk={rest[1]} initialAt={rest[2]} />
      ) : null}
      {tab === 'diff' ? <DiffView world={world} /> : null}
      {tab === 'merges' ? <Merges world={world} selected={rest[0]} /> : null}
      {tab === 'schema' ? <SchemaView world={world} /> : null}
      {tab === 'tags' ? <Tags world={world} /> : null}
      {tab === 'intelligence' ? <Intelligence world={world} /> : null}
      {tab === 'webhooks' ? <Webhooks world={world} selected={rest[0]} /> : null}
      {tab === 'live' ? <LiveEvents world={world} /> : null}
      {tab === 'consistency' ? <Consistency world={world} /> : null}
    </main>
  );
}
