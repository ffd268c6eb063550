import { useState } from 'preact/hooks';
import { enc, get, may, send } from './api.js';
import { Action, ProblemView, Section, statusClass, useLoad, WorldSelect } from './ui.js';

export interface World {
  id: string;
  status: string;
  from: { world: string; ref: string | null; commit: number | null } | null;
  createdAt: string;
}

/** The worlds as their fork tree: each world under the one it was forked from. */
function tree(worlds: World[]): Array<{ world: World; depth: number }> {
  const ids = new Set(worlds.map((w) => w.id));
  const children = new Map<string, World[]>();
  for (const w of worlds) {
    const parent = w.from && ids.has(w.from.world) ? w.from.world : '';
    children.set(parent, [...(children.get(parent) ?? []), w]);
  }
  const out: Array<{ world: World; depth: number }> = [];
  const walk = (parent: string, depth: number) => {
    for (const w of children.get(parent) ?? []) {
      out.push({ world: w, depth });
      walk(w.id, depth + 1);
    }
  };
  walk('', 0);
  return out;
}

export function Worlds() {
  const worlds = useLoad(() => get<{ worlds: World[] }>('control', '/v1/worlds'), []);
  const [id, setId] = useState('');
  const [from, setFrom] = useState('');
  const [ref, setRef] = useState('');
  const list = worlds.data?.worlds ?? [];
  const create = async () => {
    const body: Record<string, unknown> = { id };
    if (from) body.from = ref ? { world: from, ref } : { world: from };
    await send('control', 'POST', '/v1/worlds', body);
    setId('');
    await worlds.reload();
  };
  return (
    <main>
      <Section title="Worlds">
        <ProblemView error={worlds.error} />
        <table>
          <thead>
            <tr>
              <th scope="col">World</th>
              <th scope="col">Status</th>
              <th scope="col">Forked from</th>
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {tree(list).map(({ world, depth }) => (
              <tr key={world.id} data-testid={`world-${world.id}`}>
                <td style={{ paddingLeft: `${0.5 + depth * 1.5}rem` }}>
                  {depth > 0 ? '└ ' : ''}
                  <a href={`#/w/${enc(world.id)}/objects`}>{world.id}</a>
                </td>
                <td>
                  <span class={statusClass(world.status)}>{world.status}</span>
                </td>
                <td>
                  {world.from
                    ? `${world.from.world} at ${world.from.ref ?? 'fork time'}${world.from.commit !== null ? ` (commit ${world.from.commit})` : ''}`
                    : '—'}
                </td>
                <td>
                  {may(world.id, 'owner') ? (
                    <Action
                      label="Delete"
                      kind="danger"
                      run={async () => {
                        if (!confirm(`Delete world ${world.id}?`)) return;
                        await send('control', 'DELETE', `/v1/worlds/${enc(world.id)}`);
                        await worlds.reload();
                      }}
                    />
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        <Action label="Refresh" run={worlds.reload} />
      </Section>
      {
        <Section title="Create or fork a world">
          <form
            class="row"
            onSubmit={(e) => {
              e.preventDefault();
            }}
          >
            <label>
              Id
              <input value={id} onInput={(e) => setId(e.currentTarget.value)} name="id" required />
            </label>
            <WorldSelect
              label="Fork from (optional)"
              worlds={list}
              value={from}
              onChange={setFrom}
              name="from"
              none="— a new, empty world —"
            />
            <label>
              At ref (commit, instant or tag; empty: now)
              <input value={ref} onInput={(e) => setRef(e.currentTarget.value)} name="ref" />
            </label>
            <Action label={from ? 'Fork' : 'Create'} kind="primary" run={create} testid="create-world" />
          </form>
        </Section>
      }
    </main>
  );
}
