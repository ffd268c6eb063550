import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useState } from 'preact/hooks';
import { Problem } from './api.js';

/** Every failure as the API's problem: its title, and its detail when it has one. */
export function ProblemView({ error }: { error: unknown }) {
  if (!error) return null;
  const p =
    error instanceof Problem
      ? error
      : new Problem(0, 'Error', error instanceof Error ? error.message : String(error), null);
  // Validation problems name each faulty field by its JSON path: list them where they were made.
  const fields = (p.body as { errors?: Array<{ path?: string; message?: string }> } | null)?.errors ?? [];
  return (
    <div class="problem" role="alert">
      <strong>{p.title}</strong>
      {p.status ? ` (${p.status})` : ''}
      {p.detail ? <div>{p.detail}</div> : null}
      {fields.length > 0 ? (
        <ul>
          {fields.map((f) => (
            <li key={`${f.path}:${f.message}`}>
              <code>{f.path || '/'}</code> {f.message}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}

/** Loads on mount and when `deps` change; `reload` loads again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]) {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  // The caller names what the load depends on.
  const reload = useCallback(async () => {
    try {
      setData(await load());
      setError(undefined);
    } catch (err) {
      setError(err);
    }
  }, deps);
  useEffect(() => {
    void reload();
  }, [reload]);
  return { data, error, reload };
}

/** A button whose action's failure shows next to it, and which is disabled while it runs. */
export function Action(props: {
  label: string;
  run: () => Promise<unknown>;
  kind?: 'primary' | 'danger';
  testid?: string;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  return (
    <span class="action">
      <button
        type="button"
        class={props.kind ?? ''}
        disabled={busy}
        data-testid={props.testid}
        onClick={async () => {
          setBusy(true);
          setError(undefined);
          try {
            await props.run();
          } catch (err) {
            setError(err);
          } finally {
            setBusy(false);
          }
        }}
      >
        {props.label}
      </button>
      <ProblemView error={error} />
    </span>
  );
}

/** A JSON value as short text: strings quoted, absent as an em dash. */
export function Value({ value }: { value: unknown }) {
  if (value === undefined) return <span class="muted">—</span>;
  if (value === null) return <span class="muted">null</span>;
  return <code>{JSON.stringify(value)}</code>;
}

export function Section(props: { title: string; children: ComponentChildren }) {
  return (
    <section aria-label={props.title}>
      <h2>{props.title}</h2>
      {props.children}
    </section>
  );
}

export const statusClass = (status: string) => `badge badge-${status.toLowerCase()}`;

/** A labelled <select> of world ids: `none` first when given (its value ''), then `worlds`. */
export function WorldSelect(props: {
  label: string;
  worlds: Array<{ id: string }>;
  value: string;
  onChange: (id: string) => void;
  name: string;
  none?: string;
  testid?: string;
}) {
  return (
    <label>
      {props.label}
      <select
        value={props.value}
        onChange={(e) => props.onChange(e.currentTarget.value)}
        name={props.name}
        data-testid={props.testid}
      >
        {props.none !== undefined ? <option value="">{props.none}</option> : null}
        {props.worlds.map((w) => (
          <option key={w.id} value={w.id}>
            {w.id}
          </option>
        ))}
      </select>
    </label>
  );
}
