import { useEffect, useRef, useState } from 'preact/hooks';
import { accessToken, enc, get, may, Problem, send, serviceUrl } from './api.js';
import { Action, ProblemView, Section, statusClass, useLoad } from './ui.js';

/*
 * A world's webhooks with their delivery log, and its live events over data's SSE endpoint
 * (docs/adr/0059, 0060): both through data's public API, as any client would.
 */

interface Webhook {
  name: string;
  url: string;
  events: string[];
  where: string[];
  active: boolean;
  disabledReason: string | null;
  failingSince: string | null;
  backlog: number;
  dead: number;
  secondSecretUntil: string | null;
  secret?: string;
}

interface Delivery {
  id: string;
  eventId: string;
  eventType: string;
  state: 'pending' | 'delivered' | 'dead';
  attempt: number;
  at: string;
  status: number | null;
  latencyMs: number;
  response: string | null;
  error: string | null;
}

const list = (raw: string) =>
  raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

export function Webhooks({ world, selected }: { world: string; selected?: string | undefined }) {
  const hooks = useLoad(() => get<{ webhooks: Webhook[] }>('data', `/v1/worlds/${enc(world)}/webhooks`), [world]);
  const [name, setName] = useState('');
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState('object.created,object.updated,object.deleted');
  const [secret, setSecret] = useState<{ name: string; secret: string } | undefined>(undefined);
  const canWrite = may(world, 'editor');
  return (
    <>
      <Section title="Webhooks">
        <ProblemView error={hooks.error} />
        <button type="button" onClick={() => void hooks.reload()}>
          Refresh
        </button>
        <table data-testid="webhooks">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">URL</th>
              <th scope="col">Events</th>
              <th scope="col">State</th>
              <th scope="col">Backlog</th>
              <th scope="col">Dead</th>
              {canWrite ? <th scope="col">Actions</th> : null}
            </tr>
          </thead>
          <tbody>
            {(hooks.data?.webhooks ?? []).map((h) => (
              <tr key={h.name} data-testid={`webhook-${h.name}`}>
                <td>
                  <a href={`#/w/${enc(world)}/webhooks/${enc(h.name)}`}>{h.name}</a>
                </td>
                <td>
                  <code>{h.url}</code>
                </td>
                <td>{h.events.join(', ')}</td>
                <td>
                  <span class={statusClass(h.active ? 'active' : 'disabled')}>{h.active ? 'active' : 'disabled'}</span>
                  {h.disabledReason ? <div class="muted">{h.disabledReason}</div> : null}
                  {h.failingSince ? <div class="muted">failing since {h.failingSince}</div> : null}
                </td>
                <td>{h.backlog}</td>
                <td>{h.dead}</td>
                {canWrite ? (
                  <td>
                    <Action
                      label="Rotate secret"
                      testid={`rotate-${h.name}`}
                      run={async () => {
                        const rotated = await send<Webhook>(
                          'data',
                          'POST',
                          `/v1/worlds/${enc(world)}/webhooks/${enc(h.name)}/rotate-secret`,
                          {},
                        );
                        if (rotated.secret) setSecret({ name: h.name, secret: rotated.secret });
                        await hooks.reload();
                      }}
                    />
                    <Action
                      label="Delete"
                      kind="danger"
                      testid={`delete-${h.name}`}
                      run={async () => {
                        await send('data', 'DELETE', `/v1/worlds/${enc(world)}/webhooks/${enc(h.name)}`);
                        if (selected === h.name) location.hash = `#/w/${enc(world)}/webhooks`;
                        await hooks.reload();
                      }}
                    />
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
        {hooks.data && hooks.data.webhooks.length === 0 ? <p class="muted">No webhooks in {world}.</p> : null}
        {secret ? (
          <div class="notice" role="status">
            The signing secret of <strong>{secret.name}</strong>, shown this once (verify with the standardwebhooks
            package): <code data-testid="webhook-secret">{secret.secret}</code>
          </div>
        ) : null}
        {canWrite ? (
          <form class="stack" onSubmit={(e) => e.preventDefault()} aria-label="New webhook">
            <label>
              Webhook name
              <input value={name} onInput={(e) => setName(e.currentTarget.value)} name="webhookName" />
            </label>
            <label>
              Receiver URL
              <input value={url} onInput={(e) => setUrl(e.currentTarget.value)} name="webhookUrl" />
            </label>
            <label>
              Event types (comma-separated)
              <input value={events} onInput={(e) => setEvents(e.currentTarget.value)} name="webhookEvents" />
            </label>
            <Action
              label="Save webhook"
              kind="primary"
              testid="save-webhook"
              run={async () => {
                const saved = await send<Webhook>('data', 'PUT', `/v1/worlds/${enc(world)}/webhooks/${enc(name)}`, {
                  url,
                  events: list(events),
                });
                if (saved.secret) setSecret({ name: saved.name, secret: saved.secret });
                await hooks.reload();
              }}
            />
          </form>
        ) : null}
      </Section>
      {selected ? <Deliveries key={selected} world={world} name={selected} /> : null}
    </>
  );
}

function Deliveries({ world, name }: { world: string; name: string }) {
  const [pages, setPages] = useState<Delivery[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const base = `/v1/worlds/${enc(world)}/webhooks/${enc(name)}/deliveries?limit=50`;
  const first = useLoad(() => get<{ deliveries: Delivery[]; next: string | null }>('data', base), [world, name]);
  useEffect(() => {
    setPages(first.data?.deliveries ?? []);
    setNext(first.data?.next ?? null);
  }, [first.data]);
  return (
    <Section title={`Deliveries of ${name}`}>
      <ProblemView error={first.error} />
      <button type="button" onClick={() => void first.reload()} data-testid="refresh-deliveries">
        Refresh
      </button>
      <table data-testid="deliveries">
        <thead>
          <tr>
            <th scope="col">At</th>
            <th scope="col">Event</th>
            <th scope="col">webhook-id</th>
            <th scope="col">Attempt</th>
            <th scope="col">State</th>
            <th scope="col">Status</th>
            <th scope="col">Latency</th>
            <th scope="col">Answer</th>
          </tr>
        </thead>
        <tbody>
          {pages.map((d) => (
            <tr key={d.id} data-testid={`delivery-${d.id}`} data-state={d.state}>
              <td>{new Date(d.at).toLocaleString()}</td>
              <td>{d.eventType}</td>
              <td>
                <code>{d.eventId}</code>
              </td>
              <td>{d.attempt}</td>
              <td>
                <span class={statusClass(d.state)}>{d.state}</span>
              </td>
              <td>{d.status ?? '—'}</td>
              <td>{d.latencyMs} ms</td>
              <td>
                <code>{d.error ?? d.response ?? ''}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {first.data && pages.length === 0 ? <p class="muted">No delivery attempts yet.</p> : null}
      {next ? (
        <Action
          label="Older"
          run={async () => {
            const page = await get<{ deliveries: Delivery[]; next: string | null }>(
              'data',
              `${base}&cursor=${enc(next)}`,
            );
            setPages((p) => [...p, ...page.deliveries]);
            setNext(page.next);
          }}
        />
      ) : null}
    </Section>
  );
}

interface LiveEvent {
  id: string;
  event: string;
  subject: string;
  time: string;
  summary: string;
}

const TOPICS = ['objects', 'links', 'series', 'alerts', 'decisions', 'actions'];
/** The newest events the view keeps. */
const KEEP = 200;

/** One frame of text/event-stream: its fields (comment lines give only `comment`). */
function parseFrame(frame: string): { id?: string; event?: string; data?: string; comment?: boolean } {
  const out: { id?: string; event?: string; data?: string; comment?: boolean } = {};
  for (const line of frame.split('\n')) {
    if (line.startsWith(':')) out.comment = true;
    const at = line.indexOf(':');
    if (at <= 0) continue;
    const field = line.slice(0, at);
    const value = line.slice(at + 1).replace(/^ /, '');
    if (field === 'id') out.id = value;
    else if (field === 'event') out.event = value;
    else if (field === 'data') out.data = out.data === undefined ? value : `${out.data}\n${value}`;
  }
  return out;
}

function summarise(data: string): { subject: string; time: string; summary: string } {
  try {
    const ce = JSON.parse(data) as { subject?: string; time?: string; data?: { payload?: Record<string, unknown> } };
    const payload = ce.data?.payload ?? {};
    const shown = payload.after ?? payload.properties ?? payload;
    return { subject: ce.subject ?? '', time: ce.time ?? '', summary: JSON.stringify(shown).slice(0, 200) };
  } catch {
    return { subject: '', time: '', summary: data.slice(0, 200) };
  }
}

/**
 * The world's events as they happen, read from data's SSE endpoint with fetch (so the access token
 * travels in a header, not the URL) and resumed with Last-Event-ID when the stream ends — on a
 * token's renewal, an overflow or a restart — without a gap.
 */
export function LiveEvents({ world }: { world: string }) {
  const [topics, setTopics] = useState<string[]>(TOPICS);
  const [events, setEvents] = useState<LiveEvent[]>([]);
  const [state, setState] = useState<'stopped' | 'connecting' | 'connected' | 'reconnecting'>('stopped');
  const [error, setError] = useState<unknown>(undefined);
  const [received, setReceived] = useState(0);
  const stop = useRef<AbortController | undefined>(undefined);
  const last = useRef<string | undefined>(undefined);

  useEffect(() => () => stop.current?.abort(), []);

  async function run(signal: AbortSignal, chosen: string[]): Promise<void> {
    for (let attempt = 0; !signal.aborted; attempt++) {
      try {
        const headers: Record<string, string> = { accept: 'text/event-stream' };
        const token = accessToken();
        if (token) headers.authorization = `Bearer ${token}`;
        if (last.current) headers['last-event-id'] = last.current;
        const response = await fetch(
          `${serviceUrl('data')}/v1/worlds/${enc(world)}/events?topics=${enc(chosen.join(','))}`,
          { headers, signal },
        );
        if (!response.ok || !response.body) {
          const body = (await response.json().catch(() => ({}))) as { title?: string; detail?: string };
          // A position too old to resume: start again from now (the page lists no state to re-read).
          if (response.status === 410) last.current = undefined;
          throw new Problem(response.status, body.title ?? `${response.status}`, body.detail, body);
        }
        setState('connected');
        setError(undefined);
        attempt = 0;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let at = buffer.indexOf('\n\n');
          while (at >= 0) {
            const frame = parseFrame(buffer.slice(0, at));
            buffer = buffer.slice(at + 2);
            at = buffer.indexOf('\n\n');
            if (frame.event === 'overflow' || frame.event === 'closed') {
              const id = (JSON.parse(frame.data ?? '{}') as { lastEventId?: string }).lastEventId;
              if (id) last.current = id;
              continue;
            }
            if (frame.id === undefined || frame.data === undefined) continue;
            last.current = frame.id;
            const e: LiveEvent = { id: frame.id, event: frame.event ?? 'message', ...summarise(frame.data) };
            setReceived((n) => n + 1);
            setEvents((list) => [e, ...list].slice(0, KEEP));
          }
        }
      } catch (err) {
        if (signal.aborted) return;
        setError(err);
      }
      if (signal.aborted) return;
      setState('reconnecting');
      await new Promise((r) => setTimeout(r, Math.min(10_000, 250 * 2 ** attempt)));
    }
  }

  const start = () => {
    stop.current?.abort();
    const controller = new AbortController();
    stop.current = controller;
    setState('connecting');
    void run(controller.signal, topics).finally(() => {
      if (stop.current === controller) setState('stopped');
    });
  };

  return (
    <Section title="Live events">
      <fieldset class="row">
        <legend>Topics</legend>
        {TOPICS.map((t) => (
          <label key={t}>
            <input
              type="checkbox"
              checked={topics.includes(t)}
              disabled={state !== 'stopped'}
              onChange={(e) =>
                setTopics((now) =>
                  e.currentTarget.checked
                    ? TOPICS.filter((x) => x === t || now.includes(x))
                    : now.filter((x) => x !== t),
                )
              }
            />{' '}
            {t}
          </label>
        ))}
      </fieldset>
      <div class="row">
        {state === 'stopped' ? (
          <button type="button" class="primary" data-testid="live-start" disabled={topics.length === 0} onClick={start}>
            Start
          </button>
        ) : (
          <button
            type="button"
            data-testid="live-stop"
            onClick={() => {
              stop.current?.abort();
              stop.current = undefined;
              setState('stopped');
            }}
          >
            Stop
          </button>
        )}
        <span data-testid="live-state" class={statusClass(state)}>
          {state}
        </span>
        <span class="muted" data-testid="live-received">
          {received} received
        </span>
      </div>
      <ProblemView error={error} />
      <table data-testid="live-events">
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">Event</th>
            <th scope="col">Subject</th>
            <th scope="col">Change</th>
          </tr>
        </thead>
        <tbody>
          {events.map((e) => (
            <tr key={e.id} data-event={e.event}>
              <td>{e.time ? new Date(e.time).toLocaleTimeString() : ''}</td>
              <td>{e.event}</td>
              <td>
                <code>{e.subject}</code>
              </td>
              <td>
                <code>{e.summary}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </Section>
  );
}
